/**
 * The ECS and Auto Scaling emulator the rehearsal runs the stack against, driven by the real `@aws-sdk` clients
 * (endpoint override, SigV4-signed), and evalfleet's own ECS backend and eval-tier scaler driven through it. The
 * launcher here runs no containers (the rehearsal's does): a task "runs" until told to exit, so the lifecycle,
 * the quotas and the failure paths are exact and nothing depends on timing.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  AutoScalingClient,
  DescribeAutoScalingGroupsCommand,
  UpdateAutoScalingGroupCommand,
} from "@aws-sdk/client-auto-scaling";
import { ECSClient, ListTasksCommand, RunTaskCommand } from "@aws-sdk/client-ecs";
import { EcsBackend, type EcsBackendOptions } from "../../actors/dispatcher/backends/ecs.js";
import { startGraderSupervisor } from "../../actors/grader-supervisor/actor.js";
import { AsgCapacity } from "../../actors/grader-supervisor/scaler.js";
import type { Actor } from "../../actors/runtime/actor.js";
import { silentLogger } from "../../lib/log.js";
import { openPlane, type Plane } from "../../plane/connect.js";
import { StateKeys, Subjects } from "../../protocol/subjects.js";
import { createAttemptKey, runForKey } from "../../store/keys.js";
import { type FreshDb, freshDb } from "../helpers/db.js";
import { startNats, type TestNats } from "../helpers/nats.js";
import { runEvalfleet } from "../helpers/proc.js";
import { AsgModel, type InstanceLauncher } from "../rehearse/emulator/asg.js";
import { EcsModel, type EmuTask, type LaunchHooks, type TaskLauncher } from "../rehearse/emulator/ecs.js";
import { AwsEmulator } from "../rehearse/emulator/server.js";

/** Tasks start at once and run until `exit` is called; a missing image fails as a registry would make it fail. */
class HeldLauncher implements TaskLauncher, InstanceLauncher {
  readonly hooks = new Map<string, LaunchHooks>();
  readonly booted: string[] = [];
  launch(task: EmuTask, hooks: LaunchHooks): void {
    if (task.imageOverride) {
      hooks.failed(
        `CannotPullContainerError: pull image manifest has been retried 1 time(s): ${task.imageOverride}: manifest unknown`,
      );
      return;
    }
    this.hooks.set(task.arn, hooks);
    hooks.running();
  }
  exit(arn: string, code: number): void {
    for (const c of ["task", "harness"]) this.hooks.get(arn)?.exited(c, code);
  }
  async stop(task: EmuTask): Promise<void> {
    for (const c of task.containers) this.hooks.get(task.arn)?.exited(c.name, 143);
  }
  async boot(id: string): Promise<void> {
    this.booted.push(id);
  }
  async terminate(id: string): Promise<void> {
    this.booted.splice(this.booted.indexOf(id), 1);
  }
}

const KEY = { accessKeyId: "AKIAEMULATORTEST0001", secretAccessKey: "emulator-test-secret" };

/** Every emulator a test started, closed at the end even when its test failed before its own close. */
const emulators: AwsEmulator[] = [];
after(async () => {
  await Promise.all(emulators.map((e) => e.close().catch(() => {})));
});

function setup(opts: { frozenClock?: boolean; allow?: string[] } = {}) {
  const launcher = new HeldLauncher();
  const frozen = Date.now();
  const ecs = new EcsModel(launcher, {
    cluster: "evalfleet",
    ...(opts.frozenClock ? { now: () => frozen } : {}),
  });
  const asg = new AsgModel(ecs, launcher);
  const emu = new AwsEmulator(ecs, asg);
  emulators.push(emu);
  emu.addPrincipal({ ...KEY, principal: "test", allow: opts.allow ?? ["*"] });
  ecs.register({
    family: "evalfleet-harness",
    networkMode: "awsvpc",
    compatibilities: ["FARGATE"],
    volumes: [{ name: "attempt" }],
    containers: ["task", "harness"].map((name) => ({
      name,
      image: `127.0.0.1:5000/evalfleet/harness@sha256:${"a".repeat(64)}`,
      environment: {},
      secrets: {},
      essential: name === "task",
      readonlyRootFilesystem: false,
      mountPoints: [],
      dependsOn: [],
      portMappings: [],
    })),
  });
  asg.addGroup({
    name: "evalfleet-eval-hosts",
    min: 0,
    max: 4,
    desired: 0,
    launchTemplate: "evalfleet-eval-host",
  });
  return { launcher, ecs, asg, emu };
}

async function clients(emu: AwsEmulator, credentials = KEY) {
  const endpoint = await emu.listen(0);
  const common = { endpoint, region: "us-east-1", credentials, maxAttempts: 1 };
  return { ecs: new ECSClient(common), asg: new AutoScalingClient(common) };
}

/** evalfleet's ECS backend on the emulator's cluster, task definition and network. */
const ecsBackend = (ecs: ECSClient, over: Partial<EcsBackendOptions> = {}) =>
  new EcsBackend({
    ecs,
    cluster: "evalfleet",
    taskDefinition: "evalfleet-harness",
    containerName: "task",
    subnets: ["subnet-1"],
    securityGroups: ["sg-1"],
    ...over,
  });

const run = (over: Record<string, unknown> = {}) =>
  new RunTaskCommand({
    cluster: "evalfleet",
    taskDefinition: "evalfleet-harness",
    launchType: "FARGATE",
    networkConfiguration: { awsvpcConfiguration: { subnets: ["subnet-1"], assignPublicIp: "DISABLED" } },
    ...over,
  });

describe("aws emulator: the wire", () => {
  test("a request signed with another secret is refused as AWS refuses it; the right key passes", async () => {
    const { emu } = setup();
    const bad = await clients(emu, { ...KEY, secretAccessKey: "wrong" });
    await assert.rejects(bad.ecs.send(new ListTasksCommand({ cluster: "evalfleet" })), (e: Error) => {
      assert.equal(e.name, "InvalidSignatureException");
      return true;
    });
    const unknown = await clients(emu, { accessKeyId: "AKIANOBODY", secretAccessKey: "x" });
    await assert.rejects(unknown.asg.send(new DescribeAutoScalingGroupsCommand({})), /security token/);
    const good = await clients(emu);
    assert.deepEqual((await good.ecs.send(new ListTasksCommand({ cluster: "evalfleet" }))).taskArns, []);
    assert.equal(emu.counters.signatureRefused, 2);
    await emu.close();
  });

  test("a principal whose policy lacks the action gets AccessDenied", async () => {
    const { emu } = setup({ allow: ["autoscaling:*"] });
    const c = await clients(emu);
    await assert.rejects(c.ecs.send(run()), (e: Error) => e.name === "AccessDeniedException");
    assert.equal((await c.asg.send(new DescribeAutoScalingGroupsCommand({}))).AutoScalingGroups?.length, 1);
    await emu.close();
  });

  test("RunTask: at most 10 per call, overrides at most 8 KiB, idempotent by clientToken", async () => {
    const { emu, ecs } = setup();
    const c = await clients(emu);
    await assert.rejects(c.ecs.send(run({ count: 11 })), /between 1 and 10/);
    const big = [{ name: "task", environment: [{ name: "X", value: "x".repeat(9000) }] }];
    await assert.rejects(c.ecs.send(run({ overrides: { containerOverrides: big } })), /at most 8192/);
    await assert.rejects(
      c.ecs.send(run({ overrides: { containerOverrides: [{ name: "nope" }] } })),
      /not a container in the TaskDefinition/,
    );
    const a = await c.ecs.send(run({ clientToken: "tok-1", count: 3 }));
    const b = await c.ecs.send(run({ clientToken: "tok-1", count: 3 }));
    assert.equal(a.tasks?.length, 3);
    assert.deepEqual(
      b.tasks?.map((t) => t.taskArn),
      a.tasks?.map((t) => t.taskArn),
    );
    assert.equal(ecs.tasks.size, 3);
    await emu.close();
  });

  test("the Fargate launch quota: a burst of 100 tasks, then ThrottlingException until tokens refill", async () => {
    const { emu, ecs } = setup({ frozenClock: true });
    const c = await clients(emu);
    let started = 0;
    let throttled = 0;
    for (let i = 0; i < 12; i++) {
      try {
        started += (await c.ecs.send(run({ count: 10 }))).tasks?.length ?? 0;
      } catch (e) {
        assert.equal((e as Error).name, "ThrottlingException");
        throttled++;
      }
    }
    assert.equal(started, 100);
    assert.equal(throttled, 2);
    assert.equal(ecs.counters.throttled, 2);
    await emu.close();
  });
});

describe("aws emulator: evalfleet's ECS backend through it", () => {
  test("launch, observe, exit; capacity is retryable, a missing image and access denied are fatal", async () => {
    const { emu, ecs, launcher } = setup();
    const c = await clients(emu);
    const backend = ecsBackend(c.ecs, { maxApiRetries: 0 });
    const ref = (cell: string) => ({ runName: "r1", cellId: cell, attempt: 0, pool: "p" });
    const [ok] = await backend.launch([ref("c1")]);
    assert.ok(ok?.handle);
    const running = await backend.observe([ok.handle]);
    assert.equal(running[0]?.phase, "running");
    // The task's overrides carry the job reference only.
    const task = ecs.tasks.get(ok.handle)!;
    assert.deepEqual(Object.keys(task.overrides.task?.environment ?? {}).sort(), [
      "EVALFLEET_ATTEMPT",
      "EVALFLEET_CELL",
      "EVALFLEET_POOL",
      "EVALFLEET_RUN",
    ]);
    launcher.exit(ok.handle, 0);
    await new Promise((r) => setImmediate(r));
    const [done] = await backend.observe([ok.handle]);
    assert.deepEqual(done?.stop, { kind: "exited", exitCode: 0 });

    ecs.inject("capacity");
    const [cap] = await backend.launch([ref("c2")]);
    assert.equal(cap?.error?.kind, "retryable");
    assert.match(cap?.error?.reason ?? "", /Capacity is unavailable/);

    ecs.inject("missing-image");
    const [img] = await backend.launch([ref("c3")]);
    assert.ok(img?.handle, "the task is created, then fails to pull");
    const [pulled] = await backend.observe([img.handle]);
    assert.equal(pulled?.stop?.kind, "fatal");
    assert.ok(pulled?.stop && "neverStarted" in pulled.stop && pulled.stop.neverStarted);

    ecs.inject("access-denied");
    const [denied] = await backend.launch([ref("c4")]);
    assert.equal(denied?.error?.kind, "fatal");
    assert.match(denied?.error?.reason ?? "", /AccessDenied/);

    // StopTask through the shared API bucket: the task ends UserInitiated.
    const [s] = await backend.launch([ref("c5")]);
    await backend.stop([s!.handle!], "cancelled");
    const [stopped] = await backend.observe([s!.handle!]);
    assert.equal(stopped?.phase, "stopped");
    assert.equal(ecs.tasks.get(s!.handle!)?.stopCode, "UserInitiated");
    await backend.close();
    await emu.close();
  });
});

describe("aws emulator: the eval tier scaled by a live grader-supervisor", () => {
  let nats: TestNats;
  let plane: Plane;
  let store: FreshDb;
  let actor: Actor | undefined;
  before(async () => {
    nats = await startNats();
    plane = await openPlane({ nats: nats.settings, name: "eval-tier-test" });
    store = await freshDb("eval_tier");
  });
  after(async () => {
    await actor?.stop();
    await plane.close();
    await nats.cleanup();
    await store.cleanup();
  });

  test("grade jobs waiting bring hosts up (8 per host), the daemon lands on each, an idle queue takes them to zero", async () => {
    const { emu, ecs, asg, launcher } = setup();
    const c = await clients(emu);
    ecs.register({
      family: "evalfleet-eval-worker",
      networkMode: "bridge",
      compatibilities: ["EC2"],
      volumes: [],
      containers: [
        {
          name: "eval-worker",
          image: "w",
          environment: {},
          secrets: {},
          essential: true,
          readonlyRootFilesystem: false,
          mountPoints: [],
          dependsOn: [],
          portMappings: [],
        },
      ],
    });
    ecs.addService({
      name: "evalfleet-eval-worker",
      def: ecs.definition("evalfleet-eval-worker")!,
      desiredCount: 0,
      daemon: true,
      launchType: "EC2",
    });
    // Twenty grades waiting before the scaler's first look (so it never sizes for a queue half published).
    for (let i = 0; i < 20; i++)
      await plane.js.publish(Subjects.gradeJobs.one("r1"), JSON.stringify({ i }), { msgID: `job-${i}` });
    // A replica placed as the stack places it: no grade jobs taken here, the scaler on.
    actor = await startGraderSupervisor({
      plane,
      db: store.db,
      log: silentLogger(),
      env: process.env,
      gradeJobs: false,
      evalTier: {
        capacity: new AsgCapacity(c.asg, "evalfleet-eval-hosts"),
        policy: { gradesPerHost: 8, maxHosts: 10, idleGraceMs: 0, scaleInCooldownMs: 0 },
        intervalMs: 50,
      },
    });
    const waitFor = async (what: string, ok: () => boolean) => {
      for (let i = 0; i < 400 && !ok(); i++) await new Promise((r) => setTimeout(r, 25));
      assert.ok(ok(), what);
    };
    await waitFor("three hosts for 20 grades", () => asg.groups.get("evalfleet-eval-hosts")?.desired === 3);
    await asg.settled();
    assert.equal(launcher.booted.length, 3);
    ecs.startScheduler(20);
    await waitFor(
      "a daemon task on each host",
      () => ecs.live((t) => t.def.family === "evalfleet-eval-worker").length === 3,
    );
    ecs.stopScheduler();
    await plane.jsm.streams.purge("EF_GRADE_JOBS");
    await waitFor("back to zero when idle", () => asg.groups.get("evalfleet-eval-hosts")?.desired === 0);
    await asg.settled();
    assert.equal(launcher.booted.length, 0);
    assert.equal(
      ecs.live((t) => t.def.family === "evalfleet-eval-worker").length,
      0,
      "drained before terminating",
    );
    assert.deepEqual(asg.counters.desiredHistory, [3, 0]);
    await emu.close();
  });
});

describe("aws emulator: `evalfleet teardown` as an operator runs it", () => {
  let nats: TestNats;
  let plane: Plane;
  let store: FreshDb;
  before(async () => {
    nats = await startNats();
    plane = await openPlane({ nats: nats.settings, name: "teardown-test" });
    store = await freshDb("teardown_cli");
  });
  after(async () => {
    await plane.close();
    await nats.cleanup();
    await store.cleanup();
  });

  test("cancels in NATS first, stops the run's tasks, revokes its keys in PostgreSQL and KV, scales eval to zero", async () => {
    const { emu, ecs, asg } = setup();
    const endpoint = await emu.listen(0);
    const c = await clients(emu);
    const backend = ecsBackend(c.ecs);
    const mine = await backend.launch(
      [0, 1, 2].map((i) => ({ runName: "td-run", cellId: `c${i}`, attempt: 0, pool: "p" })),
    );
    const other = await backend.launch([{ runName: "other", cellId: "c0", attempt: 0, pool: "p" }]);
    await c.asg.send(
      new UpdateAutoScalingGroupCommand({ AutoScalingGroupName: "evalfleet-eval-hosts", DesiredCapacity: 2 }),
    );
    const key = await createAttemptKey(store.db, {
      run: "td-run",
      cellId: "c0",
      attempt: 0,
      models: [],
      capNanoUsd: null,
      exempt: false,
    });
    await plane.kv.jobs.put(StateKeys.attemptKey("td-run", "c0", 0), key);

    const out = await runEvalfleet(
      ["teardown", "--run", "td-run", "--cluster", "evalfleet", "--asg", "evalfleet-eval-hosts"],
      {
        ...nats.env,
        ...(store.url ? { DATABASE_URL: store.url } : { DATABASE_URL: "" }),
        AWS_ENDPOINT_URL_ECS: endpoint,
        AWS_ENDPOINT_URL_AUTO_SCALING: endpoint,
        AWS_REGION: "us-east-1",
        AWS_ACCESS_KEY_ID: KEY.accessKeyId,
        AWS_SECRET_ACCESS_KEY: KEY.secretAccessKey,
      },
    );
    const lines = out.stdout.split("\n");
    // No dispatcher runs here: the cancellation lands in the control bucket every dispatcher obeys.
    assert.match(
      lines[1] ?? "",
      /cancelled run td-run in NATS: no dispatcher answered; cancelled in the control bucket/,
    );
    const control = await plane.kv.control.get(StateKeys.control("td-run"));
    assert.equal((control?.json() as { state?: string } | undefined)?.state, "cancelled");
    assert.match(out.stdout, /harness tasks found: 3, stopped: 3, failed: 0/);
    await asg.settled();
    for (const r of mine) assert.equal(ecs.tasks.get(r.handle!)?.desiredStatus, "STOPPED");
    assert.equal(
      ecs.tasks.get(other[0]!.handle!)?.desiredStatus,
      "RUNNING",
      "another run's task is left alone",
    );
    assert.match(out.stdout, /eval capacity evalfleet-eval-hosts: 2 -> 0 hosts/);
    assert.equal(asg.groups.get("evalfleet-eval-hosts")?.desired, 0);
    assert.equal(
      (await plane.kv.jobs.get(StateKeys.attemptKey("td-run", "c0", 0)))?.operation ?? "gone",
      "gone",
      "the run's KV copies purged",
    );
    if (store.url) {
      assert.match(
        out.stdout,
        /revoked keys of run td-run: 1 key\(s\) revoked in PostgreSQL, 1 KV copy deleted/,
      );
      assert.equal(await runForKey(store.db, key), undefined);
      assert.equal(out.code, 0);
    } else {
      assert.match(
        out.stdout,
        /keys of run td-run NOT revoked: .*NOT revoked in PostgreSQL \(set DATABASE_URL\)/,
      );
      assert.equal(out.code, 1);
    }
    await backend.close();
    await emu.close();
  });
});
