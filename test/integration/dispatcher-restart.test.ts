import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Claims } from "../../actors/dispatcher/claims.js";
import {
  budgetState,
  type DispatchRig,
  rigRun,
  startRig,
  waitFor,
  waitForSettled,
} from "./dispatcher-fixture.js";

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
    await rig.submit(rigRun("crash", ["a", "b", "c", "d"], { parallel_runs: 4, budget_usd: 4 }));
    await waitFor("four launches", async () => rig.launches.length >= 4);
    // "Running" means launched and recorded: a replica that dies before its launch record lands leaves a claim the
    // next one takes over under the same attempt number, which is right but not this scenario.
    await waitFor("four launch records", async () => {
      const claims = new Claims(rig.client.kv.budgets);
      const recorded = await Promise.all(
        rig.launches.map(async (l) => (await claims.get("crash", l.cellId, l.attempt))?.claim.handle),
      );
      return recorded.every(Boolean);
    });
    // Like a crash for the in-process sim: its attempts vanish without results.
    await first.stop();
    await rig.dispatcher({ sim: { thinkMs: 100 }, extra: { reapMs: 300 } });
    const { results } = await waitForSettled(rig, "crash", 4);
    assert.deepEqual(
      results.map((r) => r.attempt),
      [1, 1, 1, 1],
      JSON.stringify(results.map((r) => [r.cellId, r.attempt, r.status, r.errorMessage])),
    );
    assert.equal(new Set(results.map((r) => r.cellId)).size, 4);
    assert.ok(results.every((r) => r.status === "PATCH_READY"));
    assert.equal((await budgetState(rig.client, "crash"))?.remainingNano, 4_000_000_000);
  });
});
