import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { requestControl } from "../../actors/dispatcher/control.js";
import { StateKeys } from "../../protocol/subjects.js";
import {
  getBillableCost,
  getTotalCost,
  insertLedgerCalls,
  upsertAttemptResults,
  voidLedgerForTrace,
} from "../../store/results.js";
import {
  budgetState,
  cellStatuses,
  type DispatchRig,
  markCompleted,
  rigRun,
  runEvents,
  startRig,
  waitFor,
} from "./dispatcher-fixture.js";

let rig: DispatchRig;
const RUN = "debt";
const COST = 900_000_000; // every attempt really costs $0.90 against a $0.50 reservation

before(async () => {
  rig = await startRig(["a", "b", "c", "d"].map((id) => ({ id })));
  await rig.dispatcher({
    sim: {
      calls: 0,
      thinkMs: 300,
      syntheticUsage: {
        inputTokens: 1,
        outputTokens: 1,
        cacheReadTokens: 0,
        cacheWriteTokens: 0,
        reasoningTokens: 0,
        costNanoUsd: COST,
        calls: 1,
      },
    },
    // The stored balance and its rebuild alone: the live follower (dispatcher-ledger-budget.test.ts) would true the
    // voided retry inserted below into the balance at a moment of its own.
    extra: { ledgerMs: 3_600_000 },
  });
});

after(async () => {
  await rig.close();
});

const config = (budget: number) =>
  rigRun(RUN, ["a", "b", "c", "d"], { parallel_runs: 2, budget_usd: budget, max_cost_usd: 0.5 });

const skipEvents = async () => (await runEvents(rig.client, RUN)).filter((e) => e.kind === "budget_skip");

describe("dispatcher overspend debt across resume", () => {
  it("overspend goes negative, is kept on resume (never re-floored), is rebuilt from billable DB spend, and a raised budget unblocks", async () => {
    await rig.submit(config(1));
    // Two cells reserve 0.50 each; each really costs 0.90, so the balance ends at 1.00 - 1.80 = -0.80.
    const b = await waitFor("first pass", async () => {
      const s = await budgetState(rig.client, RUN);
      return s && Object.keys(s.open).length === 0 && (await skipEvents()).length === 2 ? s : undefined;
    });
    assert.equal(b.remainingNano, -800_000_000);
    const ran = rig.launches.map((l) => l.cellId);
    assert.equal(ran.length, 2);
    const st = await cellStatuses(rig, RUN);
    for (const [cell, s] of st)
      if (!ran.includes(cell))
        assert.match(s.error ?? "", /^Budget cap reached \(\$-0\.[48]000 remaining < \$0\.5000 estimated\)$/);
    assert.ok((await runEvents(rig.client, RUN)).some((e) => e.kind === "budget_overspend"));

    // What the results-writer lands: two billable rows, plus an exempt (subscription) row that must not count.
    await upsertAttemptResults(rig.store.db, [
      ...ran.map((cellId) => ({
        runName: RUN,
        cellId,
        attempt: 0,
        totalCostNanoUsd: COST,
        costMode: "platform" as const,
      })),
      {
        runName: RUN,
        cellId: "exempt-cell",
        attempt: 0,
        totalCostNanoUsd: 5_000_000_000,
        costMode: "subscription" as const,
      },
    ]);
    // The ledger also holds a retried call that was voided (0.10): money spent, so it counts as debt too.
    const call = (cellId: string, attempt: number, cost: number, id: string) => ({
      callId: id,
      runName: RUN,
      cellId,
      attempt,
      status: "ok",
      costNanoUsd: cost,
      costMode: "platform",
    });
    await insertLedgerCalls(rig.store.db, [
      call(ran[0]!, 0, 100_000_000, "c0"),
      call(ran[0]!, 1, COST, "c1"),
      call(ran[1]!, 0, COST, "c2"),
    ]);
    await voidLedgerForTrace(rig.store.db, RUN, { cellId: ran[0]! }, 1);
    await markCompleted(rig, RUN, ran);
    assert.equal(await getBillableCost(rig.store.db, RUN), 1_800_000_000);
    assert.equal(await getTotalCost(rig.store.db, RUN), 6_800_000_000);

    // Resume: the debt is still there.
    const reply = await requestControl(rig.client.nc, RUN, "resume");
    assert.equal(reply.resubmitted, true);
    await waitFor("resume skips", async () => ((await skipEvents()).length === 4 ? true : undefined));
    const blocked = "Budget cap reached ($-0.8000 remaining < $0.5000 estimated)";
    for (const [cell, s] of await cellStatuses(rig, RUN))
      if (!ran.includes(cell)) assert.equal(s.error, blocked);

    // A fresh budget state (e.g. a new NATS) is rebuilt as budget - billable DB spend (the larger of the rows'
    // figure, 1.80, and the ledger's with the voided retry, 1.90).
    await rig.client.kv.budgets.delete(StateKeys.budget(RUN));
    await requestControl(rig.client.nc, RUN, "resume");
    await waitFor("rebuilt state skips", async () => ((await skipEvents()).length === 6 ? true : undefined));
    const rebuilt = await budgetState(rig.client, RUN);
    assert.equal(rebuilt?.historicalBillableNano, 1_900_000_000);
    assert.equal(rebuilt?.remainingNano, -900_000_000);
    const rebuiltText = "Budget cap reached ($-0.9000 remaining < $0.5000 estimated)";
    for (const [cell, s] of await cellStatuses(rig, RUN))
      if (!ran.includes(cell)) assert.equal(s.error, rebuiltText);

    // Raising budget_usd by 2.00 moves the balance by 2.00 (to 1.10): both remaining cells fit again.
    await rig.submit(config(3));
    await waitFor("the other two run", async () => (rig.launches.length === 4 ? true : undefined));
    assert.deepEqual(
      new Set(rig.launches.map((l) => l.cellId)),
      new Set([...(await cellStatuses(rig, RUN)).keys()].filter((c) => c !== "exempt-cell")),
    );
  });
});
