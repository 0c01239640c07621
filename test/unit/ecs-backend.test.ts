import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  DescribeAutoScalingGroupsCommand,
  type DescribeAutoScalingGroupsCommandOutput,
  UpdateAutoScalingGroupCommand,
  type UpdateAutoScalingGroupCommandOutput,
} from "@aws-sdk/client-auto-scaling";
import {
  DescribeTasksCommand,
  ListTasksCommand,
  RunTaskCommand,
  StopTaskCommand,
  type Task,
} from "@aws-sdk/client-ecs";
import { SimClock } from "../../actors/dispatcher/backends/clock.js";
import { type EcsApi, EcsBackend } from "../../actors/dispatcher/backends/ecs.js";
import { classifyRunFailure, classifyStoppedTask } from "../../actors/dispatcher/backends/ecs-classify.js";
import {
  clientTokenFor,
  refFromTags,
  startedByFor,
  tagsFor,
} from "../../actors/dispatcher/backends/ecs-ids.js";
import { teardown } from "../../actors/dispatcher/backends/ecs-teardown.js";
import { type JobRef, shouldRetry } from "../../actors/dispatcher/backends/types.js";
import { AsgCapacity, decideEvalHosts, type ScalePolicy } from "../../actors/grader-supervisor/scaler.js";
import { JobRefEnv } from "../../protocol/task.js";

/** The server side of a quota: refuses (instead of waiting) when the bucket is empty. */
class ServerBucket {
  private tokens: number;
  private last: number;
  constructor(
    private readonly burst: number,
    private readonly rate: number,
    private readonly clock: SimClock,
  ) {
    this.tokens = burst;
    this.last = clock.now();
  }
  tryTake(): boolean {
    const now = this.clock.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.rate);
    this.last = now;
    // A hair of tolerance for float rounding in the refill arithmetic.
    if (this.tokens < 1 - 1e-9) return false;
    this.tokens -= 1;
    return true;
  }
}

function awsError(name: string, message: string): Error {
  const e = new Error(message);
  e.name = name;
  return e;
}

type Outcome = Partial<Pick<Task, "lastStatus" | "stopCode" | "stoppedReason" | "startedAt" | "containers">>;

/** A fake ECS that enforces the real quotas and remembers every call. */
class FakeEcs implements EcsApi {
  readonly launchBucket: ServerBucket;
  readonly apiBucket: ServerBucket;
  throttled = 0;
  readonly launchTimes: number[] = [];
  readonly apiTimes: number[] = [];
  readonly runInputs: Array<RunTaskCommand["input"]> = [];
  readonly describeSizes: number[] = [];
  readonly tasks = new Map<string, Task>();
  private readonly byToken = new Map<string, string>();
  private seq = 0;
  /** Per cell, what RunTask does instead of starting a task (consumed once). */
  readonly runScript = new Map<string, Array<{ failure?: string; throw?: string }>>();

  constructor(readonly clock: SimClock) {
    this.launchBucket = new ServerBucket(100, 20, clock);
    this.apiBucket = new ServerBucket(100, 40, clock);
  }

  addServiceTask(): string {
    const arn = `arn:aws:ecs:us-east-1:1:task/c/svc-${this.seq++}`;
    this.tasks.set(arn, { taskArn: arn, lastStatus: "RUNNING", startedBy: "ecs-svc/123", tags: [] });
    return arn;
  }

  /** Move every live task to its end state. */
  finish(outcome: (t: Task, ref: JobRef) => Outcome): void {
    for (const t of this.tasks.values()) {
      const ref = refFromTags(t.tags);
      if (t.lastStatus === "STOPPED" || !ref) continue;
      Object.assign(t, { lastStatus: "STOPPED" }, outcome(t, ref));
    }
  }

  // biome-ignore lint/suspicious/noExplicitAny: the fake answers four command types through one entry point
  async send(command: any): Promise<any> {
    await Promise.resolve();
    if (command instanceof RunTaskCommand) return this.runTask(command.input);
    if (command instanceof StopTaskCommand) return this.stopTask(command.input);
    if (command instanceof DescribeTasksCommand) return this.describeTasks(command.input);
    if (command instanceof ListTasksCommand) return this.listTasks(command.input);
    throw new Error(`unexpected command ${command?.constructor?.name}`);
  }

  private api(): void {
    if (!this.apiBucket.tryTake()) {
      this.throttled++;
      throw awsError("ThrottlingException", "Rate exceeded");
    }
    this.apiTimes.push(this.clock.now());
  }

  private runTask(input: RunTaskCommand["input"]) {
    this.api();
    this.runInputs.push(input);
    assert.ok((input.count ?? 1) <= 10, "RunTask starts at most 10 tasks");
    assert.ok(input.clientToken && input.clientToken.length <= 64, "clientToken is at most 64 characters");
    const existing = this.byToken.get(input.clientToken);
    if (existing) return { tasks: [this.tasks.get(existing)], failures: [] };
    const env = input.overrides?.containerOverrides?.[0]?.environment ?? [];
    const cell = env.find((e) => e.name === JobRefEnv.cell)?.value ?? "";
    const scripted = this.runScript.get(cell)?.shift();
    if (scripted?.throw) throw awsError(scripted.throw, `${scripted.throw} for ${cell}`);
    if (scripted?.failure) return { tasks: [], failures: [{ arn: "", reason: scripted.failure }] };
    if (!this.launchBucket.tryTake()) {
      this.throttled++;
      throw awsError("ThrottlingException", "Rate exceeded for Fargate task launches");
    }
    this.launchTimes.push(this.clock.now());
    const arn = `arn:aws:ecs:us-east-1:1:task/c/${(this.seq++).toString(16)}`;
    const task: Task = {
      taskArn: arn,
      lastStatus: "PROVISIONING",
      startedBy: input.startedBy,
      tags: input.tags,
      containers: [{ name: "harness" }],
    };
    this.tasks.set(arn, task);
    this.byToken.set(input.clientToken, arn);
    return { tasks: [task], failures: [] };
  }

  private stopTask(input: StopTaskCommand["input"]) {
    this.api();
    const t = this.tasks.get(input.task ?? "");
    if (!t) throw awsError("InvalidParameterException", "The referenced task was not found.");
    if (t.lastStatus !== "STOPPED")
      Object.assign(t, { lastStatus: "STOPPED", stopCode: "UserInitiated", stoppedReason: input.reason });
    return { task: t };
  }

  private describeTasks(input: DescribeTasksCommand["input"]) {
    const arns = input.tasks ?? [];
    assert.ok(arns.length <= 100, "DescribeTasks takes at most 100 tasks");
    this.describeSizes.push(arns.length);
    const tasks = arns.map((a) => this.tasks.get(a)).filter((t): t is Task => t !== undefined);
    const failures = arns.filter((a) => !this.tasks.has(a)).map((arn) => ({ arn, reason: "MISSING" }));
    return { tasks, failures };
  }

  private listTasks(input: ListTasksCommand["input"]) {
    const all = [...this.tasks.values()]
      .filter((t) => t.lastStatus !== "STOPPED")
      .filter((t) => input.startedBy === undefined || t.startedBy === input.startedBy)
      .map((t) => t.taskArn ?? "");
    const start = Number(input.nextToken ?? 0);
    const page = all.slice(start, start + (input.maxResults ?? 100));
    const next = start + page.length < all.length ? String(start + page.length) : undefined;
    return { taskArns: page, nextToken: next };
  }
}

class FakeAsg {
  desired = 7;
  max = 50;
  min = 2;
  // biome-ignore lint/suspicious/noExplicitAny: two command types through one entry point
  async send(command: any): Promise<any> {
    if (command instanceof DescribeAutoScalingGroupsCommand) {
      const out: DescribeAutoScalingGroupsCommandOutput = {
        $metadata: {},
        AutoScalingGroups: [
          {
            AutoScalingGroupName: "eval",
            DesiredCapacity: this.desired,
            MaxSize: this.max,
            MinSize: this.min,
            DefaultCooldown: 0,
            AvailabilityZones: [],
            HealthCheckType: "EC2",
            CreatedTime: new Date(0),
          },
        ],
      };
      return out;
    }
    if (command instanceof UpdateAutoScalingGroupCommand) {
      this.desired = command.input.DesiredCapacity ?? this.desired;
      this.min = command.input.MinSize ?? this.min;
      const out: UpdateAutoScalingGroupCommandOutput = { $metadata: {} };
      return out;
    }
    throw new Error("unexpected command");
  }
}

const refs = (n: number, run = "run-1", attempt = 1): JobRef[] =>
  Array.from({ length: n }, (_, i) => ({
    runName: run,
    cellId: `cell-${i}`,
    attempt,
    pool: "claude__sonnet",
  }));

function backend(ecs: FakeEcs, clock: SimClock): EcsBackend {
  return new EcsBackend({
    ecs,
    cluster: "evalfleet",
    taskDefinition: "evalfleet-harness:1",
    containerName: "harness",
    subnets: ["subnet-a"],
    securityGroups: ["sg-task"],
    clock,
  });
}

/**
 * Do these call times conform to a token bucket of `burst`, refilling `perSec`? (Equivalently: for every i < j,
 * j - i + 1 <= burst + perSec * (t_j - t_i).) Checked independently of the fake's own enforcement.
 */
function conforms(times: number[], burst: number, perSec: number): boolean {
  let tokens = burst;
  let last = times[0] ?? 0;
  for (const t of times) {
    tokens = Math.min(burst, tokens + ((t - last) / 1000) * perSec);
    last = t;
    tokens -= 1;
    if (tokens < -1e-6) return false;
  }
  return true;
}

/** Largest number of events inside any window of `windowMs` (two pointers over sorted times). */
function maxInWindow(times: number[], windowMs: number): number {
  let best = 0;
  let lo = 0;
  for (let hi = 0; hi < times.length; hi++) {
    while ((times[hi] ?? 0) - (times[lo] ?? 0) >= windowMs) lo++;
    best = Math.max(best, hi - lo + 1);
  }
  return best;
}

describe("ecs backend: launching at the quota", () => {
  test("20,000 tasks launch with no call over any quota, in ≈ (20000-100)/20 s of simulated time", async () => {
    const clock = new SimClock();
    const ecs = new FakeEcs(clock);
    const b = backend(ecs, clock);
    const t0 = clock.now();
    const results = await b.launch(refs(20_000));
    const elapsedS = (clock.now() - t0) / 1000;

    assert.equal(results.filter((r) => r.handle).length, 20_000);
    assert.equal(ecs.throttled, 0, "the server-side buckets never refused a call");
    assert.equal(ecs.launchTimes.length, 20_000);
    const expected = (20_000 - 100) / 20;
    assert.ok(Math.abs(elapsedS - expected) / expected < 0.01, `took ${elapsedS}s, expected ≈ ${expected}s`);

    // Per-second counts: the burst in the first second, then never more than the refill rate (+1 for a boundary).
    const perSecond = new Map<number, number>();
    for (const t of ecs.launchTimes)
      perSecond.set(Math.floor(t / 1000), (perSecond.get(Math.floor(t / 1000)) ?? 0) + 1);
    assert.ok((perSecond.get(0) ?? 0) <= 100 + 20, "first second: burst + refill");
    for (const [s, n] of perSecond) if (s > 0) assert.ok(n <= 21, `second ${s}: ${n} launches`);
    assert.ok(maxInWindow(ecs.launchTimes.slice(200), 1000) <= 21, "launches in any 1 s after the burst");
    assert.ok(conforms(ecs.launchTimes, 100, 20), "launch times conform to the Fargate bucket");
    // The shared RunTask/StopTask bucket: one call per launch, so never above burst + 40/s.
    assert.equal(ecs.apiTimes.length, 20_000);
    assert.ok(maxInWindow(ecs.apiTimes.slice(200), 1000) <= 41, "API calls in any 1 s after the burst");
    assert.ok(conforms(ecs.apiTimes, 100, 40), "API call times conform to the RunTask/StopTask bucket");

    // One task per call, each with its own reference and clientToken.
    assert.ok(
      ecs.runInputs.every((i) => i.count === 1),
      "one task per call",
    );
    assert.equal(new Set(ecs.runInputs.map((i) => i.clientToken)).size, 20_000);
    const env = ecs.runInputs[123]?.overrides?.containerOverrides?.[0];
    assert.equal(env?.name, "harness");
    assert.deepEqual(
      env?.environment?.map((e) => e.name),
      [JobRefEnv.run, JobRefEnv.cell, JobRefEnv.attempt, JobRefEnv.pool],
    );
    assert.equal(ecs.runInputs[0]?.networkConfiguration?.awsvpcConfiguration?.assignPublicIp, "DISABLED");
  });

  test("an attempt's NATS user goes to the named (task) container's override only, never to another container", async () => {
    const clock = new SimClock();
    const ecs = new FakeEcs(clock);
    const b = backend(ecs, clock);
    const [ref] = refs(1);
    const launched = await b.launch([
      { ...ref!, natsCredential: { jwt: "eyJ.a.b", seed: "SUSEED", creds: "x" } },
    ]);
    assert.ok(launched[0]?.handle, "launched");
    assert.equal(
      Object.hasOwn(launched[0]!.ref, "natsCredential"),
      false,
      "the credential is not kept with the ref",
    );
    const overrides = ecs.runInputs[0]?.overrides?.containerOverrides ?? [];
    assert.equal(overrides.length, 1, "one container override");
    assert.equal(
      overrides[0]?.name,
      "harness",
      "the container the settings name (the task container when deployed)",
    );
    const env = Object.fromEntries((overrides[0]?.environment ?? []).map((e) => [e.name, e.value]));
    assert.equal(env.NATS_JWT, "eyJ.a.b");
    assert.equal(env.NATS_NKEY_SEED, "SUSEED");
    assert.equal(
      JSON.stringify(ecs.runInputs[0]).match(/SUSEED/g)?.length,
      1,
      "the seed is nowhere else in the call",
    );
    await b.close();
  });

  test("launch and stop share the API bucket: stopping during a launch stays within 40/s combined", async () => {
    const clock = new SimClock();
    const ecs = new FakeEcs(clock);
    const b = backend(ecs, clock);
    const first = await b.launch(refs(400, "run-a"));
    const launching = b.launch(refs(400, "run-b"));
    await b.stop(
      first.map((r) => r.handle ?? ""),
      "cancelled",
    );
    await launching;
    assert.equal(ecs.throttled, 0);
    assert.equal(ecs.apiTimes.length, 1200);
    assert.ok(conforms(ecs.apiTimes, 100, 40), "RunTask + StopTask together conform to the shared bucket");
    assert.ok(conforms(ecs.launchTimes, 100, 20), "launches conform to the Fargate bucket");
  });

  test("observe batches DescribeTasks at 100", async () => {
    const clock = new SimClock();
    const ecs = new FakeEcs(clock);
    const b = backend(ecs, clock);
    const launched = await b.launch(refs(250));
    const states = await b.observe(launched.map((r) => r.handle ?? ""));
    assert.deepEqual(ecs.describeSizes, [100, 100, 50]);
    assert.equal(states.length, 250);
    assert.ok(
      states.every((s) => s.phase === "pending"),
      "all pending",
    );
    assert.equal(states[7]?.ref.cellId, "cell-7");
  });
});

describe("ecs backend: failures", () => {
  test("partial RunTask failures: capacity is retryable, a missing cluster or denied access is fatal, throttling is retried", async () => {
    const clock = new SimClock();
    const ecs = new FakeEcs(clock);
    ecs.runScript.set("cell-3", [{ failure: "RESOURCE:FARGATE" }]);
    ecs.runScript.set("cell-7", [
      { failure: "Capacity is unavailable at this time. Please try again later." },
    ]);
    ecs.runScript.set("cell-11", [{ failure: "MISSING" }]);
    ecs.runScript.set("cell-15", [{ throw: "ThrottlingException" }, { throw: "ServerException" }]);
    ecs.runScript.set("cell-20", [{ throw: "AccessDeniedException" }]);
    const b = backend(ecs, clock);
    const res = await b.launch(refs(30));
    const by = new Map(res.map((r) => [r.ref.cellId, r]));
    assert.equal(by.get("cell-3")?.error?.kind, "retryable");
    assert.equal(by.get("cell-7")?.error?.kind, "retryable");
    assert.equal(by.get("cell-11")?.error?.kind, "fatal");
    assert.ok(by.get("cell-15")?.handle, "throttled call retried with the same token and started");
    assert.equal(by.get("cell-20")?.error?.kind, "fatal");
    for (const r of res) if (r.error) assert.equal((r.error as { neverStarted: boolean }).neverStarted, true);
    assert.equal(res.filter((r) => r.handle).length, 26);
    const tokens15 = ecs.runInputs.filter(
      (i) => i.overrides?.containerOverrides?.[0]?.environment?.[1]?.value === "cell-15",
    );
    assert.equal(tokens15.length, 3);
    assert.equal(new Set(tokens15.map((i) => i.clientToken)).size, 1);

    // Relaunching a cell whose RunTask failed uses a fresh token (the failed one is settled).
    const again = await b.launch([by.get("cell-3")!.ref]);
    assert.ok(again[0]?.handle, "relaunch started");
    const t3 = ecs.runInputs.filter(
      (i) => i.overrides?.containerOverrides?.[0]?.environment?.[1]?.value === "cell-3",
    );
    assert.notEqual(t3[0]?.clientToken, t3[1]?.clientToken);
  });

  test("retryable stops are retried and fatal ones are not; tasks that never started are marked so", async () => {
    const clock = new SimClock();
    const ecs = new FakeEcs(clock);
    const b = backend(ecs, clock);
    const outcomes: Record<string, Outcome[]> = {
      "cell-0": [
        {
          stopCode: "EssentialContainerExited",
          startedAt: new Date(1),
          containers: [{ name: "harness", exitCode: 0 }],
        },
      ],
      "cell-1": [
        {
          stopCode: "EssentialContainerExited",
          startedAt: new Date(1),
          containers: [{ name: "harness", exitCode: 3 }],
        },
      ],
      "cell-2": [
        {
          stopCode: "TaskFailedToStart",
          stoppedReason: "ResourceInitializationError: unable to pull secrets or registry auth: i/o timeout",
        },
        {
          stopCode: "EssentialContainerExited",
          startedAt: new Date(1),
          containers: [{ name: "harness", exitCode: 0 }],
        },
      ],
      "cell-3": [
        {
          stopCode: "TaskFailedToStart",
          stoppedReason: "CannotPullContainerError: ref pull has been retried: manifest unknown",
        },
      ],
      "cell-4": [
        {
          stopCode: "SpotInterruption",
          stoppedReason: "Your Spot Task was interrupted.",
          startedAt: new Date(1),
        },
        {
          stopCode: "EssentialContainerExited",
          startedAt: new Date(1),
          containers: [{ name: "harness", exitCode: 0 }],
        },
      ],
      "cell-5": [
        {
          stopCode: "TaskFailedToStart",
          stoppedReason:
            "ResourceInitializationError: AccessDeniedException: not authorized to perform secretsmanager:GetSecretValue",
        },
      ],
      "cell-6": [
        { stopCode: "TaskFailedToStart", stoppedReason: "Capacity is unavailable at this time." },
        { stopCode: "TaskFailedToStart", stoppedReason: "Capacity is unavailable at this time." },
        { stopCode: "TaskFailedToStart", stoppedReason: "Capacity is unavailable at this time." },
      ],
      "cell-7": [
        {
          stopCode: "TerminationNotice",
          stoppedReason: "Task stopped due to host termination",
          startedAt: new Date(1),
        },
        {},
      ],
    };
    const launches = new Map<string, number>();
    const finals = new Map<string, ReturnType<typeof classifyStoppedTask>>();
    let live = (await b.launch(refs(8))).map((r) => r.handle ?? "");
    for (const r of refs(8)) launches.set(r.cellId, 1);
    const maxTries = 3;
    while (live.length > 0) {
      ecs.finish((_t, ref) => {
        const seq = outcomes[ref.cellId] ?? [];
        const o = seq[(launches.get(ref.cellId) ?? 1) - 1] ?? seq[seq.length - 1] ?? {};
        return Object.keys(o).length > 0
          ? o
          : {
              stopCode: "EssentialContainerExited",
              startedAt: new Date(1),
              containers: [{ name: "harness", exitCode: 0 }],
            };
      });
      const states = await b.observe(live);
      const again: JobRef[] = [];
      for (const s of states) {
        assert.equal(s.phase, "stopped");
        const stop = s.stop!;
        const tries = launches.get(s.ref.cellId) ?? 0;
        if (shouldRetry(stop, tries, maxTries)) again.push(s.ref);
        else finals.set(s.ref.cellId, stop);
        if (stop.kind !== "exited")
          assert.equal(stop.neverStarted, !s.ref.cellId.match(/cell-[47]/), s.ref.cellId);
      }
      for (const r of again) launches.set(r.cellId, (launches.get(r.cellId) ?? 0) + 1);
      live = (await b.launch(again)).map((r) => r.handle ?? "");
    }
    assert.deepEqual(Object.fromEntries(launches), {
      "cell-0": 1,
      "cell-1": 1,
      "cell-2": 2,
      "cell-3": 1,
      "cell-4": 2,
      "cell-5": 1,
      "cell-6": 3,
      "cell-7": 2,
    });
    assert.deepEqual(finals.get("cell-1"), { kind: "exited", exitCode: 3 });
    assert.deepEqual(finals.get("cell-2"), { kind: "exited", exitCode: 0 });
    assert.equal(finals.get("cell-3")?.kind, "fatal");
    assert.equal(finals.get("cell-5")?.kind, "fatal");
    assert.equal(
      finals.get("cell-6")?.kind,
      "retryable",
      "gave up after maxTries, still not the model's failure",
    );
    // Every relaunch used a new clientToken; the first launch's token is the attempt's natural one.
    assert.equal(new Set(ecs.runInputs.map((i) => i.clientToken)).size, ecs.runInputs.length);
  });

  test("stop classification table", () => {
    const c = (o: Outcome) => classifyStoppedTask(o, "harness");
    assert.equal(
      c({
        stopCode: "TaskFailedToStart",
        stoppedReason: "CannotPullContainerError: failed to resolve ref: not found",
      }).kind,
      "fatal",
    );
    assert.equal(
      c({
        stopCode: "TaskFailedToStart",
        stoppedReason: "CannotPullContainerError: dial tcp 10.0.0.1:443: i/o timeout",
      }).kind,
      "retryable",
    );
    assert.equal(
      c({
        stopCode: "TaskFailedToStart",
        stoppedReason: "Timeout waiting for network interface provisioning to complete.",
      }).kind,
      "retryable",
    );
    assert.equal(c({ stopCode: "UserInitiated", stoppedReason: "cancelled" }).kind, "fatal");
    assert.deepEqual(
      c({
        stopCode: "UserInitiated",
        startedAt: new Date(1),
        containers: [{ name: "harness", exitCode: 137 }],
      }),
      {
        kind: "exited",
        exitCode: 137,
      },
    );
    assert.equal(classifyRunFailure({ reason: "RESOURCE:MEMORY" }).kind, "retryable");
    assert.equal(classifyRunFailure({ reason: "AGENT" }).kind, "retryable");
    assert.equal(classifyRunFailure({ reason: "ATTRIBUTE" }).kind, "fatal");
  });
});

describe("ecs backend: idempotency", () => {
  test("clientToken is derived from run/cell/attempt, at most 64 characters, and repeats return the same task", async () => {
    const r: JobRef = {
      runName: "a-very-long-run-name-".repeat(8),
      cellId: "astropy__astropy-12907",
      attempt: 2,
      pool: "p",
    };
    const t = clientTokenFor(r);
    assert.ok(t.length <= 64, "token length");
    assert.match(t, /^[A-Za-z0-9_-]+$/);
    assert.equal(t, clientTokenFor({ ...r }));
    assert.notEqual(t, clientTokenFor({ ...r, attempt: 3 }));
    assert.notEqual(t, clientTokenFor(r, 1));
    assert.ok(startedByFor(r.runName).length <= 128, "startedBy length");
    assert.match(startedByFor("run:with@odd+chars"), /^[A-Za-z0-9_-]+$/);
    assert.deepEqual(refFromTags(tagsFor({ runName: "r:1", cellId: "c/1", attempt: 4, pool: "x__y" })), {
      runName: "r:1",
      cellId: "c/1",
      attempt: 4,
      pool: "x__y",
    });

    const clock = new SimClock();
    const ecs = new FakeEcs(clock);
    const one = refs(1)[0]!;
    const a = await backend(ecs, clock).launch([one]);
    const b = await backend(ecs, clock).launch([one]); // a second dispatcher, or this one after a restart
    const same = backend(ecs, clock);
    const [c, d] = await Promise.all([same.launch([one]), same.launch([one])]);
    assert.equal(a[0]?.handle, b[0]?.handle);
    assert.equal(c[0]?.handle, a[0]?.handle);
    assert.equal(d[0]?.handle, a[0]?.handle);
    assert.equal(ecs.tasks.size, 1);
  });
});

describe("teardown", () => {
  test("cancels the run first, stops every task of a run, then all, leaves services alone, scales eval to zero, revokes keys", async () => {
    const clock = new SimClock();
    const ecs = new FakeEcs(clock);
    const b = backend(ecs, clock);
    await b.launch(refs(230, "run-1"));
    await b.launch(refs(120, "run:2"));
    const svc = [ecs.addServiceTask(), ecs.addServiceTask()];
    const asg = new FakeAsg();
    const revoked: string[] = [];
    const order: string[] = [];
    const stopsBefore = () => [...ecs.tasks.values()].filter((t) => t.lastStatus === "STOPPED").length;

    const buckets = b.buckets; // same process: the quota state is shared
    const r1 = await teardown({
      ecs,
      cluster: "evalfleet",
      run: "run-1",
      clock,
      buckets,
      cancelRun: async (run) => {
        order.push(`cancel ${run} after ${stopsBefore()} stops`);
        return "cancelled";
      },
      revokeRunKeys: async (run) => {
        revoked.push(run);
        return "1 key";
      },
    });
    assert.equal(r1.found, 230);
    assert.equal(r1.stopped.length, 230);
    assert.deepEqual(revoked, ["run-1"]);
    assert.deepEqual(order, ["cancel run-1 after 0 stops"]);
    assert.deepEqual(r1.cancelled, [{ run: "run-1", how: "cancelled" }]);
    assert.deepEqual(r1.keysRevoked, [{ run: "run-1", what: "1 key" }]);
    const alive = [...ecs.tasks.values()].filter((t) => t.lastStatus !== "STOPPED");
    assert.equal(alive.length, 120 + 2);

    const all = await teardown({
      ecs,
      cluster: "evalfleet",
      clock,
      buckets,
      evalGroups: [new AsgCapacity(asg, "eval")],
    });
    assert.equal(all.stopped.length, 120);
    assert.deepEqual(all.runs, ["run:2"]);
    assert.deepEqual(all.keysNotRevoked, [
      { run: "run:2", reason: "no key revocation configured (set DATABASE_URL)" },
    ]);
    assert.deepEqual(all.notCancelled, [
      { run: "run:2", reason: "no NATS connection: a live dispatcher may launch again" },
    ]);
    assert.deepEqual(all.scaled, [{ asg: "eval", from: 7, to: 0 }]);
    assert.equal(asg.desired, 0);
    assert.equal(asg.min, 0);
    for (const t of ecs.tasks.values()) {
      if (svc.includes(t.taskArn ?? "")) assert.equal(t.lastStatus, "RUNNING");
      else assert.equal(t.lastStatus, "STOPPED");
    }
    assert.equal(ecs.throttled, 0);
  });
});

describe("eval-tier scaler", () => {
  const policy: ScalePolicy = {
    gradesPerHost: 8,
    maxHosts: 40,
    idleGraceMs: 600_000,
    scaleInCooldownMs: 300_000,
  };
  test("hosts = ceil(work / gradesPerHost), capped, and zero only after the idle grace", () => {
    assert.equal(decideEvalHosts(policy, {}, { nowMs: 0, work: 17, current: 0 }).desired, 3);
    assert.equal(decideEvalHosts(policy, {}, { nowMs: 0, work: 10_000, current: 3 }).desired, 40);
    let d = decideEvalHosts(policy, {}, { nowMs: 1_000, work: 0, current: 3 });
    assert.equal(d.desired, 3);
    d = decideEvalHosts(policy, d.state, { nowMs: 500_000, work: 0, current: 3 });
    assert.equal(d.desired, 3);
    d = decideEvalHosts(policy, d.state, { nowMs: 601_000, work: 0, current: 3 });
    assert.equal(d.desired, 0);
    // Work arriving resets the idle clock.
    d = decideEvalHosts(policy, d.state, { nowMs: 602_000, work: 1, current: 0 });
    assert.equal(d.desired, 1);
    assert.equal(d.state.idleSinceMs, undefined);
    // Scale-in waits for the cooldown since the last one.
    d = decideEvalHosts(policy, { lastScaleInMs: 600_000 }, { nowMs: 650_000, work: 8, current: 5 });
    assert.equal(d.desired, 5);
    d = decideEvalHosts(policy, d.state, { nowMs: 950_000, work: 8, current: 5 });
    assert.equal(d.desired, 1);
  });
});
