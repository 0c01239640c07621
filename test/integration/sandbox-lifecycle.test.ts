/**
 * Nothing a containerised harness starts outlives its attempt, however the attempt ends: a timeout, a cancel on the
 * attempt's signal subject, or its task process SIGKILLed (the local backend removes the attempt's containers when
 * it sees the task exit). Each harness starts a `setsid` daemon first — a process that escapes its process group —
 * and the test sees it running on the host before the attempt is ended. Needs a Docker API (CI starts one).
 */
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { after, before, describe, test } from "node:test";
import { LocalBackend } from "../../actors/dispatcher/backends/local.js";
import type { ContainerRuntime } from "../../containers/index.js";
import { mintAttemptUser } from "../../plane/nats-auth.js";
import { Subjects } from "../../protocol/subjects.js";
import { ATTEMPT_LABEL, attemptLabel } from "../../task/sandbox.js";
import { testRootfs, testRuntime } from "../helpers/docker.js";
import { waitFor } from "./dispatcher-fixture.js";
import { RUN_KEY, startTaskRig, type TaskRig } from "./task-fixture.js";

let rt: ContainerRuntime;
let dockerHost: string;
let rootfs: string;
let rig: TaskRig;

before(async () => {
  ({ runtime: rt, dockerHost } = await testRuntime());
  rootfs = await testRootfs();
  rig = await startTaskRig();
});
after(async () => {
  await rig?.close();
});

/** A harness that starts a daemon in a session of its own (marked by its argument), then waits for ever. */
const daemonHarness = (mark: number) =>
  `setsid sh -c 'exec sleep ${mark}' </dev/null >/dev/null 2>&1 & sleep 3000`;

/** Host pids whose command line is exactly `sleep <mark>` (a container's processes are host processes). */
async function daemons(mark: number): Promise<number[]> {
  const out: number[] = [];
  for (const d of await readdir("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    const cmd = await readFile(`/proc/${d}/cmdline`, "utf8").catch(() => "");
    if (cmd === `sleep\0${mark}\0`) out.push(Number(d));
  }
  return out;
}

const containerEnv = () => ({
  PATH: process.env.PATH ?? "",
  HOME: "/tmp",
  EVALFLEET_SANDBOX: "container",
  DOCKER_HOST: dockerHost,
  EVALFLEET_BASE_ROOTFS: rootfs,
});

async function planDaemon(run: string, mark: number): Promise<string> {
  return await rig.plan({
    name: run,
    harnesses: [{ name: "daemon", adapter: "command", settings: { command: daemonHarness(mark) } }],
    sandbox: { memory_mb: 256, pids: 64, cpus: 1, tmp_mb: 16 },
    timeout_seconds: 600,
  });
}

/** Nothing of the attempt is left: no container with its label, no daemon on the host. */
async function assertNothingSurvives(ref: { run: string; cell: string; attempt: number }, mark: number) {
  await waitFor("the attempt's containers to go", async () =>
    (await rt.list({ [ATTEMPT_LABEL]: attemptLabel(ref) })).length === 0 ? true : undefined,
  );
  await waitFor("the daemon to go", async () => ((await daemons(mark)).length === 0 ? true : undefined));
  assert.deepEqual(
    await rt.list({ [ATTEMPT_LABEL]: attemptLabel(ref) }),
    [],
    "a container of the attempt survived",
  );
  assert.deepEqual(await daemons(mark), [], "the harness's setsid daemon survived its attempt");
}

describe("a containerised attempt leaves nothing running", { timeout: 600_000 }, () => {
  test("a timed-out attempt: its container and the setsid daemon in it go", async () => {
    const mark = 7771;
    const cell = await planDaemon("lifecycle-timeout", mark);
    const ref = { run: "lifecycle-timeout", cell, attempt: 1 };
    let sawDaemon = false;
    const watching = waitFor(
      "the daemon to start",
      async () => ((await daemons(mark)).length > 0 ? true : undefined),
      180_000,
    )
      .then(() => {
        sawDaemon = true;
      })
      .catch(() => {});
    const r = await rig.run(ref.run, cell, 1, { env: containerEnv(), timeoutMs: 20_000 });
    await watching;
    assert.equal(r.sandbox, "container");
    assert.equal(r.status, "TIMEOUT", r.errorMessage ?? "");
    assert.ok(sawDaemon, "the daemon ran (else this test proves nothing)");
    await assertNothingSurvives(ref, mark);
  });

  test("a cancelled attempt: its container and the setsid daemon in it go", async () => {
    const mark = 7772;
    const cell = await planDaemon("lifecycle-cancel", mark);
    const ref = { run: "lifecycle-cancel", cell, attempt: 1 };
    const running = rig.run(ref.run, cell, 1, { env: containerEnv() });
    await waitFor(
      "the daemon to start",
      async () => ((await daemons(mark)).length > 0 ? true : undefined),
      180_000,
    );
    rig.plane.nc.publish(
      Subjects.attemptSignal(ref.run, cell, 1),
      JSON.stringify({ reason: "cancelled by operator", run: ref.run, cellId: cell, attempt: 1 }),
    );
    const r = await running;
    assert.equal(r.status, "HARNESS_ERROR");
    assert.match(r.errorMessage ?? "", /cancelled by operator/);
    await assertNothingSurvives(ref, mark);
  });

  test("a task SIGKILLed mid-attempt: the local backend removes its containers, the daemon goes with them", async () => {
    const mark = 7773;
    const run = "lifecycle-kill";
    const cell = await planDaemon(run, mark);
    const ref = { run, cell, attempt: 0 };
    const backend = new LocalBackend({
      sandbox: "container",
      inheritedEnv: { ...process.env, DOCKER_HOST: dockerHost, EVALFLEET_BASE_ROOTFS: rootfs },
      env: {
        NATS_URL: rig.nats.url, // codemod: keep (the task's credential comes on stdin)
        EVALFLEET_GATEWAY_URL: rig.provider.url,
        EVALFLEET_RUN_KEY: RUN_KEY,
        EVALFLEET_WORKDIR: rig.workRoot,
        EVALFLEET_GIT_MIRRORS: rig.mirrorRoot,
        EVALFLEET_LOG_LEVEL: "warn",
      },
    });
    try {
      // As the dispatcher launches it: the attempt's own NATS user on the task's stdin.
      const nats = await mintAttemptUser(
        rig.nats.signer,
        { run, cell, attempt: 0, task: "sample-calc-add" },
        Date.now() + 600_000,
      );
      const [launched] = await backend.launch([
        { runName: run, cellId: cell, attempt: 0, pool: "daemon__gpt-5-mini", natsCredential: nats },
      ]);
      assert.ok(launched?.handle, JSON.stringify(launched?.error));
      await waitFor(
        "the daemon to start",
        async () => ((await daemons(mark)).length > 0 ? true : undefined),
        180_000,
      );
      assert.equal(
        (await rt.list({ [ATTEMPT_LABEL]: attemptLabel(ref) })).length,
        1,
        "the harness's container",
      );
      const pid = Number(launched.handle.split(":")[2]);
      process.kill(pid, "SIGKILL");
      const [state] = await waitFor("the backend to see the task gone", async () => {
        const s = await backend.observe([launched.handle!]);
        return s[0]?.phase === "stopped" ? s : undefined;
      });
      assert.equal(state?.stop?.kind, "retryable", "a killed task is an infrastructure stop");
      await assertNothingSurvives(ref, mark);
    } finally {
      await backend.close();
    }
  });
});
