import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { newBudgetState } from "../../actors/dispatcher/budget.js";
import { type CellWork, CellWorkSchema } from "../../protocol/messages.js";
import { StateKeys, Subjects } from "../../protocol/subjects.js";
import { Streams } from "../../protocol/topology.js";
import { type DispatchRig, rigRun, startRig, waitFor, waitForSettled } from "./dispatcher-fixture.js";

/*
 * A launch that failed after the cell message was acked (by another delivery of it that saw the launch under way)
 * leaves this replica's own claim: never launched, reservation held, no message left to bring it back. The reaper
 * launches it once the claim is stale — it used to look only at dead replicas' claims.
 */

let rig: DispatchRig;

before(async () => {
  rig = await startRig([{ id: "a" }]);
});

after(async () => {
  await rig.close();
});

describe("a replica's own stuck claim", () => {
  it("claimed, never launched, its message gone: the reaper launches it", async () => {
    const run = "stuck";
    await rig.submit(rigRun(run, ["a"], { parallel_runs: 1, budget_usd: 1 }));
    // The planner's work is in place; no dispatcher has seen the cell message yet.
    const work = await waitFor("the planned cell", async () => {
      for await (const k of await rig.client.kv.jobs.keys(StateKeys.cellsOfRun(run))) {
        const e = await rig.client.kv.jobs.get(k);
        if (e?.operation === "PUT") return CellWorkSchema.parse(e.json()) as CellWork;
      }
      return undefined;
    });
    await waitFor("the cell message", async () => {
      const info = await rig.client.jsm.streams.info(Streams.cells.name, {
        subjects_filter: Subjects.cells.run(run),
      });
      return info.state.messages > 0;
    });
    // Its message acked and gone, as the redelivered copy's ack left it.
    await rig.client.jsm.streams.purge(Streams.cells.name, { filter: Subjects.cells.run(run) });
    const d = await rig.dispatcher({ sim: { thinkMs: 50 }, extra: { reapMs: 200, staleClaimMs: 1_000 } });
    // What the failed launch left behind: the reservation, the launch record and this replica's claim, not launched.
    const at = new Date(Date.now() - 5_000).toISOString();
    const state = newBudgetState(run, 1_000_000_000, 0);
    state.open[work.cellId] = { r: 0, p: work.pool, x: false, a: [], s: 0, g: 1 };
    await rig.client.kv.budgets.put(StateKeys.budget(run), JSON.stringify(state));
    await rig.client.kv.budgets.put(
      StateKeys.cellLaunch(run, work.cellId),
      JSON.stringify({ gen: 1, base: 0, latest: 0, at }),
    );
    await rig.client.kv.budgets.put(
      StateKeys.claim(run, work.cellId, 0),
      JSON.stringify({ by: d.id, gen: 1, base: 0, pool: work.pool, at }),
    );
    const { results, budget } = await waitForSettled(rig, run, 1, 30_000);
    assert.deepEqual(
      results.map((r) => [r.cellId, r.attempt, r.status]),
      [[work.cellId, 0, "PATCH_READY"]],
      "launched once, under its own attempt number",
    );
    assert.equal(rig.launches.filter((l) => l.runName === run).length, 1);
    assert.deepEqual(budget.open, {});
  });
});
