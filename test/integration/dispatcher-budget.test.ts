import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { budgetSkipReason } from "../../actors/dispatcher/budget.js";
import { StateKeys, Subjects } from "../../protocol/subjects.js";
import {
  budgetState,
  cellStatuses,
  type DispatchRig,
  rigRun,
  runEvents,
  startRig,
  waitFor,
} from "./dispatcher-fixture.js";

let rig: DispatchRig;
const TASKS = ["t1", "t2", "t3", "t4", "t5"];

before(async () => {
  rig = await startRig([...TASKS.map((id) => ({ id })), { id: "judge1", track: "open_ended" }]);
  // Two replicas share every run: the budget must hold across them.
  await rig.dispatcher({ sim: { thinkMs: 3_000 } });
  await rig.dispatcher({ sim: { thinkMs: 3_000 } });
});

after(async () => {
  await rig.close();
});

const harness = [{ name: "h1", adapter: "sim" }];

/** Wait until every cell of the run was either launched or skipped, and no reservation is left open. */
async function settle(run: string, cells: number) {
  return await waitFor(`run ${run} to settle`, async () => {
    const st = await cellStatuses(rig, run);
    const launched = rig.launches.filter((l) => l.runName === run).length;
    const skipped = [...st.values()].filter((s) => s.status === "skipped").length;
    const b = await budgetState(rig.client, run);
    if (st.size !== cells || launched + skipped !== cells || !b || Object.keys(b.open).length > 0)
      return undefined;
    return { st, launched, skipped, b };
  });
}

describe("dispatcher budget", () => {
  it("two replicas on one run whose budget admits exactly k cells launch exactly k; the rest skip with the seed's text", async () => {
    // 10 cells, estimate = max_cost_usd 0.30, budget 1.00 → k = 3 (0.10 left < 0.30).
    await rig.submit({
      name: "k-of-n",
      harnesses: harness,
      models: [{ name: "claude-sonnet-4-5" }],
      tasks: TASKS,
      repeats: 2,
      parallel_runs: 20,
      budget_usd: 1.0,
      max_cost_usd: 0.3,
    });
    const { st, launched, skipped, b } = await settle("k-of-n", 10);
    assert.equal(launched, 3);
    assert.equal(skipped, 7);
    const reason = "Budget cap reached ($0.1000 remaining < $0.3000 estimated)";
    for (const s of st.values()) if (s.status === "skipped") assert.equal(s.error, reason);
    // No attempt launched twice.
    const keys = rig.launches.filter((l) => l.runName === "k-of-n").map((l) => `${l.cellId}/${l.attempt}`);
    assert.equal(new Set(keys).size, keys.length);
    assert.equal(b.remainingNano, 1_000_000_000);
    const events = await runEvents(rig.client, "k-of-n");
    assert.equal(events.filter((e) => e.kind === "budget_skip").length, 7);
  });

  it("exempt cells reserve 0 and are never skipped; open_ended and platform cells are charged", async () => {
    await rig.submit({
      name: "exempt",
      harnesses: harness,
      models: [
        { name: "sub-model", cost_mode: "subscription", prices: { input_per_mtok: 1, output_per_mtok: 2 } },
        { name: "plat-model", cost_mode: "platform", prices: { input_per_mtok: 1, output_per_mtok: 2 } },
      ],
      tasks: ["t1", "t2", "judge1"],
      parallel_runs: 20,
      budget_usd: 0,
      max_cost_usd: 0.5,
    });
    const { st } = await settle("exempt", 6);
    const launched = new Set(rig.launches.filter((l) => l.runName === "exempt").map((l) => l.cellId));
    assert.deepEqual([...launched].sort(), ["h1__sub-model__t1__r0", "h1__sub-model__t2__r0"]);
    const skip = budgetSkipReason(0, 500_000_000);
    assert.equal(skip, "Budget cap reached ($0.0000 remaining < $0.5000 estimated)");
    assert.equal(st.get("h1__sub-model__judge1__r0")?.error, skip);
    assert.equal(st.get("h1__plat-model__t1__r0")?.error, skip);
  });

  it("estimate is budget_usd / the real cell count when no per-attempt cap is set", async () => {
    // tasks ["*"]: 6 tasks × 1 model = 6 cells; estimate = 0.60 / 6 = 0.10 → all six fit exactly.
    await rig.submit(rigRun("est-div", ["*"], { harnesses: harness, parallel_runs: 20, budget_usd: 0.6 }));
    const { launched, skipped } = await settle("est-div", 6);
    assert.equal(launched, 6);
    assert.equal(skipped, 0);
  });

  it("parallel_runs bounds concurrency across replicas", async () => {
    await rig.submit(rigRun("par", TASKS, { harnesses: harness, parallel_runs: 2 }));
    // While the first two run (3 s each), nobody else may start.
    await waitFor("two launches", async () => rig.launches.filter((l) => l.runName === "par").length >= 2);
    await new Promise((r) => setTimeout(r, 1_000));
    assert.equal(rig.launches.filter((l) => l.runName === "par").length, 2);
    const b = await budgetState(rig.client, "par");
    assert.equal(Object.keys(b?.open ?? {}).length, 2);
  });

  it("a second message for a running cell (another generation) never launches it twice", async () => {
    await rig.submit(rigRun("dup", ["t1"], { harnesses: harness, parallel_runs: 5 }));
    await waitFor("launch", async () => rig.launches.some((l) => l.runName === "dup"));
    const work = await rig.client.kv.jobs.get(StateKeys.job("dup", "h1__m__t1__r0"));
    for (let i = 0; i < 3; i++)
      await rig.client.js.publish(Subjects.cells.one("dup", "h1__m"), work!.string(), {
        msgID: `dup-again-${i}`,
      });
    await new Promise((r) => setTimeout(r, 1_500));
    assert.equal(rig.launches.filter((l) => l.runName === "dup").length, 1);
  });
});
