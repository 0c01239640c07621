import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { attemptResults, budgetState, type DispatchRig, startRig, waitFor } from "./dispatcher-fixture.js";

let rig: DispatchRig;

before(async () => {
  rig = await startRig(["a", "b", "c", "d"].map((id) => ({ id })));
});

after(async () => {
  await rig.close();
});

describe("dispatcher restart", () => {
  it("a dispatcher dies with attempts running: a new replica relaunches them; no cell lost, none run twice at once", async () => {
    const first = await rig.dispatcher({ sim: { thinkMs: 60_000 }, extra: { reapMs: 300 } });
    await rig.submit({
      name: "crash",
      harnesses: [{ name: "h", adapter: "sim" }],
      models: [{ name: "m" }],
      tasks: ["a", "b", "c", "d"],
      parallel_runs: 4,
      budget_usd: 4,
    });
    await waitFor("four launches", async () => rig.launches.length >= 4);
    // Like a crash for the in-process sim: its attempts vanish without results.
    await first.stop();
    await rig.dispatcher({ sim: { thinkMs: 100 }, extra: { reapMs: 300 } });
    const results = await waitFor("every cell finishes", async () => {
      const r = await attemptResults(rig.client, "crash");
      const b = await budgetState(rig.client, "crash");
      return r.length === 4 && b && Object.keys(b.open).length === 0 ? r : undefined;
    });
    assert.deepEqual(
      results.map((r) => r.attempt),
      [1, 1, 1, 1],
    );
    assert.equal(new Set(results.map((r) => r.cellId)).size, 4);
    assert.ok(results.every((r) => r.status === "PATCH_READY"));
    assert.equal((await budgetState(rig.client, "crash"))?.remainingNano, 4_000_000_000);
  });
});
