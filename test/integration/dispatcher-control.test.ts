import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { requestControl } from "../../actors/dispatcher/control.js";
import { CANCELLED_ERROR } from "../../actors/dispatcher/dispatcher.js";
import {
  attemptResults,
  budgetState,
  cellStatuses,
  type DispatchRig,
  markCompleted,
  rigRun,
  runEvents,
  startRig,
  waitFor,
} from "./dispatcher-fixture.js";

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL("../../", import.meta.url));
let rig: DispatchRig;
const TASKS = ["a", "b", "c", "d", "e", "f"];

before(async () => {
  rig = await startRig(TASKS.map((id) => ({ id })));
  await rig.dispatcher({ sim: { thinkMs: 4_000 } });
  await rig.dispatcher({ sim: { thinkMs: 4_000 } });
});

after(async () => {
  await rig.close();
});

const launched = (name: string) => rig.launches.filter((l) => l.runName === name);

async function cli(...args: string[]) {
  return await run(process.execPath, ["bin/evalfleet.js", ...args], {
    cwd: ROOT,
    env: { ...process.env, ...rig.nats.env, EVALFLEET_LOG_LEVEL: "silent" },
  });
}

describe("dispatcher control", () => {
  it("drain: no new launches, running attempts finish; resume (CLI) runs only the incomplete cells", async () => {
    await rig.submit(rigRun("drainme", TASKS, { parallel_runs: 2 }));
    await waitFor("two launches", async () => launched("drainme").length >= 2);
    const { stdout } = await cli("drain", "drainme", "--json");
    const reply = JSON.parse(stdout) as { ok: boolean; state: string; message: string };
    assert.equal(reply.ok, true);
    assert.equal(reply.state, "draining");
    // Whatever was launched when the drain was obeyed (two, unless a loaded machine let a sim task finish and a
    // third start while the CLI was starting) publishes its result; nothing else starts.
    const atDrain = launched("drainme").length;
    assert.ok(atDrain >= 2 && atDrain < 6, `${atDrain} launched before the drain`);
    await waitFor(
      "running attempts finish",
      async () => (await attemptResults(rig.client, "drainme")).length === atDrain,
    );
    await new Promise((r) => setTimeout(r, 1_000));
    assert.equal(launched("drainme").length, atDrain);
    const st = await cellStatuses(rig, "drainme");
    assert.equal([...st.values()].filter((s) => s.status === "pending").length, 6 - atDrain);
    // What the results-writer would do for the finished cells, then resume.
    await markCompleted(
      rig,
      "drainme",
      launched("drainme").map((l) => l.cellId),
    );
    const drained = (await runEvents(rig.client, "drainme")).filter((e) => e.kind === "drained");
    assert.equal(drained.length, 1, "two replicas obeyed; one event");
    const res = await cli("resume", "drainme");
    assert.match(res.stdout, /resumed/);
    await waitFor(
      "the others run",
      async () => (await attemptResults(rig.client, "drainme")).length === 6,
      30_000,
    );
    assert.equal(new Set(launched("drainme").map((l) => l.cellId)).size, 6);
    assert.equal(launched("drainme").length, 6);
  });

  it("cancel: running attempts are stopped and their cells end failed with a clear error", async () => {
    await rig.submit(rigRun("cancelme", TASKS, { parallel_runs: 3, budget_usd: 5 }));
    await waitFor("three launches", async () => launched("cancelme").length >= 3);
    const reply = await requestControl(rig.client.nc, "cancelme", "cancel");
    assert.equal(reply.state, "cancelled");
    const st = await waitFor("all cells failed", async () => {
      const s = await cellStatuses(rig, "cancelme");
      return [...s.values()].every((x) => x.status === "failed") ? s : undefined;
    });
    for (const s of st.values()) assert.equal(s.error, CANCELLED_ERROR);
    // Every replica reads the run's state from KV after admitting a cell, so none launches into a slot the other
    // replica's stopped attempt just freed.
    assert.equal(launched("cancelme").length, 3);
    const b = await waitFor("reservations released", async () => {
      const s = await budgetState(rig.client, "cancelme");
      return s && Object.keys(s.open).length === 0 ? s : undefined;
    });
    assert.equal(b.remainingNano, 5_000_000_000);
    const results = await attemptResults(rig.client, "cancelme");
    assert.ok(results.every((r) => r.status === "HARNESS_ERROR" && /stopped/.test(r.errorMessage ?? "")));
    const events = await runEvents(rig.client, "cancelme");
    assert.ok(events.some((e) => e.kind === "cell_failed"));
    assert.equal(events.filter((e) => e.kind === "cancelled").length, 1);
  });
});
