import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { LocalBackend } from "../../actors/dispatcher/backends/local.js";
import {
  attemptResults,
  type DispatchRig,
  rigRun,
  startRig,
  waitFor,
  waitForSettled,
} from "./dispatcher-fixture.js";

let rig: DispatchRig;
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const TASK = fileURLToPath(new URL("../fixtures/dispatcher-task.mjs", import.meta.url));

before(async () => {
  rig = await startRig([{ id: "ok" }, { id: "dies" }, { id: "killed" }, { id: "silent" }]);
  await rig.dispatcher({
    backend: new LocalBackend({
      command: [process.execPath, TASK],
      env: { ...rig.nats.env },
      inheritedEnv: process.env,
    }),
    extra: { retryDelaysMs: [100, 100, 100] },
  });
});

after(async () => {
  await rig.close();
});

describe("dispatcher local backend", () => {
  it("runs a process per attempt with the job reference; a task that dies without a result gets a HARNESS_ERROR", async () => {
    await rig.submit(
      rigRun("local1", ["ok", "dies"], { adapter: "command", parallel_runs: 2, budget_usd: 1 }),
    );
    const { results } = await waitForSettled(rig, "local1", 2);
    // Give a late duplicate the chance to show up: there must be exactly one result per attempt.
    await new Promise((r) => setTimeout(r, 800));
    const all = await attemptResults(rig.client, "local1");
    assert.equal(all.length, 2);
    const ok = results.find((r) => r.cellId === "h__m__ok__r0");
    assert.equal(ok?.status, "EMPTY_PATCH"); // the task's own result won over the dispatcher's fallback
    const died = results.find((r) => r.cellId === "h__m__dies__r0");
    assert.equal(died?.status, "HARNESS_ERROR");
    assert.equal(died?.exitCode, 3);
    assert.match(died?.errorMessage ?? "", /exited with code 3 without publishing a result/);
    assert.match(died?.stderr ?? "", /task local1\/h__m__dies__r0\/0 pool=m key=\[REDACTED\]/);
    // HARNESS_ERROR is final at once: attempt 0 only.
    assert.ok(all.every((r) => r.attempt === 0));
  });

  it("a clean exit (code 0) without a result gets its stand-in only after the longer clean-exit grace", async () => {
    // A task exits 0 only once its result is acked, so the dispatcher waits for the result consumer to catch up
    // instead of publishing a duplicate for every attempt of a loaded plane.
    await rig.submit(rigRun("local3", ["silent"], { adapter: "command", parallel_runs: 1, budget_usd: 1 }));
    const [r] = await waitFor("the stand-in result", async () => {
      const all = await attemptResults(rig.client, "local3");
      return all.length > 0 ? all : undefined;
    });
    assert.equal(r?.status, "HARNESS_ERROR");
    assert.match(r?.errorMessage ?? "", /exited with code 0 without publishing a result/);
    const exitFile = join(tmpdir(), "evalfleet-silent-local3.exit");
    const exitedAt = Number(readFileSync(exitFile, "utf8"));
    rmSync(exitFile);
    const waited = Date.parse(r?.finishedAt ?? "") - exitedAt;
    assert.ok(waited >= 2_400, `stand-in ${waited} ms after the exit; the clean-exit grace is 2,500 ms`);
  });

  it("find() names an attempt's running task process — the topmost of those carrying its job reference", async () => {
    const ref = { runName: "find-run", cellId: "h__m__t__r0", attempt: 2, pool: "h__m" };
    // A task and a child of its own (as its git processes are): both inherit the job reference.
    const task = spawn(
      process.execPath,
      [
        "-e",
        "require('node:child_process').spawn(process.execPath, ['-e', 'setTimeout(() => {}, 30000)'], { stdio: 'inherit' }); setTimeout(() => {}, 30000)",
      ],
      {
        env: {
          ...process.env,
          EVALFLEET_RUN: ref.runName,
          EVALFLEET_CELL: ref.cellId,
          EVALFLEET_ATTEMPT: String(ref.attempt),
        },
        stdio: "ignore",
        // a group of their own, so the finally below takes the child too (a later run would find it)
        detached: true,
      },
    );
    try {
      const backend = new LocalBackend({ env: { ...rig.nats.env }, inheritedEnv: process.env });
      await new Promise((r) => setTimeout(r, 500));
      assert.equal(await backend.find(ref), `local:${hostname()}:${task.pid}:found`);
      assert.equal(await backend.find({ ...ref, attempt: 3 }), undefined, "another attempt's is not it");
      task.kill("SIGKILL");
      await new Promise((r) => task.once("exit", r));
      await new Promise((r) => setTimeout(r, 200));
      const left = await backend.find(ref);
      assert.ok(
        left === undefined || left !== `local:${hostname()}:${task.pid}:found`,
        "a dead task is not found",
      );
    } finally {
      try {
        process.kill(-(task.pid ?? 0), "SIGKILL");
      } catch {
        // gone already
      }
    }
  });

  it("a task process killed by a signal is an infrastructure stop: retried, never the model's HARNESS_ERROR", async () => {
    await rig.submit(rigRun("local2", ["killed"], { adapter: "command", parallel_runs: 1, budget_usd: 1 }));
    const { results } = await waitForSettled(rig, "local2", 1);
    await new Promise((r) => setTimeout(r, 800));
    assert.equal((await attemptResults(rig.client, "local2")).length, 1, "no result for the killed attempt");
    assert.equal(results[0]?.attempt, 1, "relaunched as attempt 1");
    assert.equal(results[0]?.status, "EMPTY_PATCH");
    // The killed task's harness (its own process group) did not outlive it.
    const pidFile = join(tmpdir(), "evalfleet-harness-local2.pid");
    const harness = Number(readFileSync(pidFile, "utf8"));
    rmSync(pidFile);
    await waitFor("the orphaned harness is killed", async () => (alive(harness) ? undefined : true));
  });
});
