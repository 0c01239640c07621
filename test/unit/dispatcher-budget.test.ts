import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  type AdmitRequest,
  applyOp,
  budgetSkipReason,
  counts,
  formatUsd4,
  newBudgetState,
  submissionOver,
} from "../../actors/dispatcher/budget.js";

const USD = 1_000_000_000;
const admitOp = (cellId: string, over: Partial<AdmitRequest> = {}): AdmitRequest => ({
  kind: "admit",
  cellId,
  pool: "p",
  exempt: false,
  estimateNano: USD / 2,
  parallel: 100,
  budgetNano: USD,
  configRev: 1,
  ...over,
});

describe("a cell's submission is over once its reservation is released", () => {
  it("open under its own generation: not over; released, or held by a newer submission: over", () => {
    const s = newBudgetState("r", USD, 0);
    const run = counts(s);
    assert.equal(submissionOver(null, "a", 7), true, "no state at all");
    applyOp(s, admitOp("a", { gen: 7 }), run);
    assert.equal(s.open.a?.g, 7, "the admitting message's generation is kept");
    assert.equal(submissionOver(s, "a", 7), false, "its own submission still holds it");
    assert.equal(
      submissionOver(s, "a", 3),
      true,
      "an earlier submission's is over (a resubmission was admitted)",
    );
    // The same cell admitted again by a redelivered message keeps the first admitter's generation.
    applyOp(s, admitOp("a", { gen: 9 }), run);
    assert.equal(s.open.a?.g, 7);
    applyOp(s, { kind: "reconcile", cellId: "a", attempt: 0, actualNano: 1, final: true }, run);
    assert.equal(submissionOver(s, "a", 7), true, "released");
  });

  it("an entry from before entries carried their generation counts as the asker's", () => {
    const s = newBudgetState("r", USD, 0);
    applyOp(s, admitOp("a"), counts(s));
    assert.equal(s.open.a?.g, undefined);
    assert.equal(submissionOver(s, "a", 7), false);
  });
});

describe("budget math", () => {
  it("prints the seed's reason text", () => {
    assert.equal(
      budgetSkipReason(12_300_000, 50_000_000),
      "Budget cap reached ($0.0123 remaining < $0.0500 estimated)",
    );
    assert.equal(formatUsd4(-800_000_000), "$-0.8000");
    assert.equal(formatUsd4(0), "$0.0000");
    assert.equal(formatUsd4(49_999), "$0.0000");
    assert.equal(formatUsd4(50_000), "$0.0001");
    assert.equal(formatUsd4(12_345 * USD), "$12345.0000");
  });

  it("skips when nothing is left or when the estimate does not fit; exempt cells never skip", () => {
    const s = newBudgetState("r", USD, 0, 1);
    const run = counts(s);
    assert.equal(applyOp(s, admitOp("a"), run).kind, "admitted");
    assert.equal(applyOp(s, admitOp("b"), run).kind, "admitted");
    // remaining exactly 0: skipped (the `<= 0` half) even with a 0 estimate
    const zero = applyOp(s, admitOp("c", { estimateNano: 0 }), run);
    assert.equal(zero.kind, "skipped");
    assert.equal(applyOp(s, admitOp("d", { exempt: true }), run).kind, "admitted");
    assert.equal(s.open.d?.r, 0);
    // remaining positive but below the estimate (the `<` half)
    applyOp(s, { kind: "reconcile", cellId: "a", attempt: 0, actualNano: USD / 4, final: true }, run);
    const r = applyOp(s, admitOp("e"), run);
    assert.deepEqual(r.kind === "skipped" && r.reason, budgetSkipReason(USD / 4, USD / 2));
  });

  it("reconciles each attempt once, deducts exempt spend never, releases on the final outcome", () => {
    const s = newBudgetState("r", USD, 0, 1);
    const run = counts(s);
    applyOp(s, admitOp("a"), run);
    applyOp(s, admitOp("x", { exempt: true }), run);
    const rec = { kind: "reconcile" as const, cellId: "a", attempt: 0, actualNano: 100, final: false };
    applyOp(s, rec, run);
    applyOp(s, rec, run); // a redelivered result changes nothing
    assert.equal(s.remainingNano, USD / 2 - 100);
    applyOp(s, { kind: "reconcile", cellId: "x", attempt: 0, actualNano: 7_000, final: true }, run);
    assert.equal(s.remainingNano, USD / 2 - 100);
    assert.equal(s.totalNano, 7_100);
    assert.equal(s.billableNano, 100);
    applyOp(s, { ...rec, attempt: 1, actualNano: 200, final: true }, run);
    assert.equal(s.remainingNano, USD - 300);
    assert.deepEqual(s.open, {});
    assert.equal(run.running, 0);
  });

  it("capacity: parallel_runs and pool fleet size make a cell wait; a held cell is admitted again without a second reservation", () => {
    const s = newBudgetState("r", null, 0, 1);
    const run = counts(s);
    assert.equal(applyOp(s, admitOp("a", { parallel: 1, budgetNano: null }), run).kind, "admitted");
    assert.equal(applyOp(s, admitOp("b", { parallel: 1, budgetNano: null }), run).kind, "wait");
    assert.equal(applyOp(s, admitOp("b", { poolLimit: 1, budgetNano: null }), run).kind, "wait");
    assert.equal(
      applyOp(s, admitOp("c", { pool: "q", poolLimit: 1, budgetNano: null }), run).kind,
      "admitted",
    );
    const again = applyOp(s, admitOp("a", { budgetNano: null }), run);
    assert.equal(again.kind === "admitted" && again.already, true);
  });

  it("debt: created as budget - historical billable; a newer config moves the cap, an older one never does", () => {
    const s = newBudgetState("r", USD, 1_800_000_000, 1);
    assert.equal(s.remainingNano, -800_000_000);
    const run = counts(s);
    assert.equal(applyOp(s, admitOp("a"), run).kind, "skipped");
    applyOp(s, admitOp("a", { budgetNano: 3 * USD, configRev: 2 }), run);
    assert.equal(s.remainingNano, 1_200_000_000 - USD / 2);
    applyOp(s, admitOp("b", { budgetNano: USD, configRev: 1 }), run); // stale replica
    assert.equal(s.budgetNano, 3 * USD);
  });

  it("follows the ledger: spend no attempt reported is deducted once, never counted twice after a reconcile", () => {
    const s = newBudgetState("r", USD, 0, 1);
    const run = counts(s);
    const ledger = (byCell: Record<string, number>) => applyOp(s, { kind: "ledger", byCell }, run);
    applyOp(s, admitOp("a", { estimateNano: USD / 10 }), run); // reserves 0.10
    applyOp(s, admitOp("b", { estimateNano: USD / 10 }), run);
    // Calls of open cells are covered by their reservations: nothing to deduct, however much they have spent.
    assert.deepEqual(ledger({ a: USD / 20, b: USD / 4 }), {
      kind: "ledgered",
      extraNano: 0,
      remainingNano: 0.8 * USD,
      changed: false,
    });
    // a ends reporting 0.05; then the judge spends 0.30 on it, which no attempt reports.
    applyOp(s, { kind: "reconcile", cellId: "a", attempt: 0, actualNano: USD / 20, final: true }, run);
    assert.equal(s.remainingNano, 0.85 * USD);
    const j = ledger({ a: 0.35 * USD, b: USD / 4 });
    assert.equal(j.kind === "ledgered" && j.extraNano, 0.3 * USD);
    assert.equal(s.remainingNano, 0.55 * USD, "1.00 − a's 0.35 − b's 0.10 reservation");
    // Following again changes nothing: the extra is recomputed, not added up.
    ledger({ a: 0.35 * USD, b: USD / 4 });
    assert.equal(s.remainingNano, 0.55 * USD);
    // b fails once (0.25 reconciled, the cell stays open for its retry), then ends having spent 0.05 more.
    applyOp(s, { kind: "reconcile", cellId: "b", attempt: 0, actualNano: USD / 4, final: false }, run);
    ledger({ a: 0.35 * USD, b: USD / 4 });
    assert.equal(s.ledgerExtraNano, 0.3 * USD, "an open cell's reconciled attempt is not a's extra");
    applyOp(s, { kind: "reconcile", cellId: "b", attempt: 1, actualNano: USD / 20, final: true }, run);
    ledger({ a: 0.35 * USD, b: 0.3 * USD });
    assert.equal(s.remainingNano, 0.35 * USD, "0.65 spent in all, each call counted once");
    // A cell admitted now sees that balance: an estimate of 0.40 is skipped.
    assert.equal(applyOp(s, admitOp("c", { estimateNano: 0.4 * USD }), run).kind, "skipped");
    // A run without a cap never moves its balance.
    const free = newBudgetState("f", null, 0, 1);
    applyOp(free, { kind: "ledger", byCell: { a: USD } }, counts(free));
    assert.equal(free.remainingNano, 0);
  });
});
