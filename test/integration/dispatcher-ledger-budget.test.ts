import assert from "node:assert/strict";
import { after, before, it } from "node:test";
import { budgetSkipReason } from "../../actors/dispatcher/budget.js";
import { insertLedgerCalls } from "../../store/ledger.js";
import { budgetState, cellStatuses, type DispatchRig, startRig, waitFor } from "./dispatcher-fixture.js";

/*
 * The live budget follows the ledger: spend that no attempt reports (here a judge's call, written to the ledger as
 * the judge writes it) reduces what is left for the cells still to admit while the run goes, not only on resume.
 */

let rig: DispatchRig;
const TASKS = ["t1", "t2", "t3", "t4", "t5", "t6"];
const USD = 1_000_000_000;

before(async () => {
  rig = await startRig(TASKS.map((id) => ({ id })));
  await rig.dispatcher({ sim: { thinkMs: 1_500 }, extra: { ledgerMs: 100 } });
});

after(async () => {
  await rig.close();
});

const row = (cellId: string, attempt: number, callId: string, costNanoUsd: number) => ({
  callId,
  runName: "ledger-follows",
  cellId,
  attempt,
  pool: "claude-sonnet-4-5",
  provider: "anthropic",
  status: "ok",
  inputTokens: 10_000,
  outputTokens: 100,
  costNanoUsd,
  latencyMs: 1_000,
  pacerWaitMs: 0,
  costMode: "platform",
  startedAt: new Date(),
});

it("spend no attempt reported reaches the live budget: the cells after it are skipped at the cap", async () => {
  const run = "ledger-follows";
  await rig.submit({
    name: run,
    harnesses: [{ name: "h1", adapter: "sim" }],
    models: [{ name: "claude-sonnet-4-5" }],
    tasks: TASKS,
    parallel_runs: 1,
    budget_usd: 1.0,
    max_cost_usd: 0.1,
  });
  const launches = () => rig.launches.filter((l) => l.runName === run);
  // The first cell has ended (the second is running): the judge now spends $0.90 on it, which no attempt reports.
  const [first, second] = await waitFor("the second launch", async () => {
    const l = launches();
    return l.length >= 2 ? l : undefined;
  });
  await insertLedgerCalls(rig.store.db, [row(first!.cellId, first!.attempt, "judge-call", 0.9 * USD)]);
  const followed = await waitFor("the budget to follow the ledger", async () => {
    const b = await budgetState(rig.client, run);
    return b && b.ledgerExtraNano > 0 ? b : undefined;
  });
  assert.equal(followed.ledgerExtraNano, 0.9 * USD, "the first cell reported nothing of it");
  assert.equal(followed.remainingNano, 0, "1.00 − the judge's 0.90 − the running cell's 0.10 reservation");
  // The running cell's task spends $0.05 that its result will not report (as a task that dies mid-call).
  await insertLedgerCalls(rig.store.db, [
    row(second!.cellId, second!.attempt, "unreported-call", 0.05 * USD),
  ]);
  const settled = await waitFor("every cell launched or skipped", async () => {
    const st = await cellStatuses(rig, run);
    const b = await budgetState(rig.client, run);
    const skipped = [...st.values()].filter((s) => s.status === "skipped").length;
    return st.size === TASKS.length &&
      launches().length + skipped === TASKS.length &&
      b &&
      Object.keys(b.open).length === 0
      ? { st, b }
      : undefined;
  });
  assert.equal(launches().length, 2, "no cell launched after the judge's spend left too little");
  // The second cell reconciled at what the ledger holds of it: 1.00 − 0.90 − 0.05.
  assert.equal(settled.b.remainingNano, 0.05 * USD);
  const skipped = [...settled.st.values()].filter((s) => s.status === "skipped");
  assert.equal(skipped.length, TASKS.length - 2);
  for (const s of skipped) assert.equal(s.error, budgetSkipReason(0.05 * USD, 0.1 * USD));
});
