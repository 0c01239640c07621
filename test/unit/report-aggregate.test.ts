import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { buildReport, errorClassOf, isResolved, isScored } from "../../report/aggregate.js";
import { attempt, ledger, sampleInput } from "./report-fixtures.js";

describe("report aggregation", () => {
  it("classifies attempts: scored, resolved, error class", () => {
    const [a1, , a3, , a5, b1, b2] = sampleInput().attempts;
    assert.deepEqual(
      [a1, a3, a5, b1, b2].map((a) => isScored(a!)),
      [true, true, false, true, false],
    );
    assert.deepEqual(
      [a1, a3, b1].map((a) => isResolved(a!)),
      [true, false, false],
    );
    assert.equal(errorClassOf(a1!), null);
    assert.equal(errorClassOf(a3!), "tests_failed");
    assert.equal(errorClassOf(a5!), null);
    assert.equal(errorClassOf(b1!), "harness_error");
    // judged open-ended attempts are resolved at score >= 0.5
    assert.equal(
      isResolved(attempt({ cellId: "j", resolved: null, gradeStatus: "JUDGED", success: 0.5 })),
      true,
    );
    assert.equal(
      isResolved(attempt({ cellId: "j", resolved: null, gradeStatus: "JUDGED", success: 0.4 })),
      false,
    );
  });

  it("per harness × model: counts, rates, pass@k, money from the ledger", () => {
    const r = buildReport(sampleInput());
    assert.equal(r.k, 2);
    assert.deepEqual(
      r.groups.map((g) => `${g.harness}/${g.model}`),
      ["h1/m1", "h2/m1"],
    );
    const g = r.groups[0]!;
    assert.equal(g.cells, 5);
    assert.equal(g.attempts, 7); // a2 is attempt 2: three attempts
    assert.equal(g.retriedCells, 1);
    assert.equal(g.scored, 4);
    assert.equal(g.resolved, 3);
    assert.equal(g.resolvedRate, 0.75);
    assert.ok(g.resolvedCi95 && g.resolvedCi95.low < 0.75 && g.resolvedCi95.high > 0.75);
    assert.equal(g.passAt1, (1 + 0.5) / 2);
    // t1: 2/2 -> 1; t2: 1/2 -> pass@2 = 1
    assert.deepEqual(g.passAtK, { k: 2, value: 1, ci95: { low: 1, high: 1 }, tasks: 2, excludedTasks: 0 });
    // pass^2: t1 resolved in both repeats (1), t2 in one of two (0)
    assert.deepEqual(
      { ...g.passHatK, ci95: null },
      { k: 2, value: 0.5, ci95: null, tasks: 2, excludedTasks: 0 },
    );
    assert.equal(g.resolvedCiMethod, "task-bootstrap");
    assert.deepEqual(g.flip, { rate: 0.5, mixedTasks: 1, tasksWithRepeats: 2 });
    assert.equal(g.costNanoUsd, 4_000_000_000);
    assert.equal(g.billableNanoUsd, 3_000_000_000);
    assert.equal(g.retriedSpendNanoUsd, 500_000_000);
    assert.equal(g.costPerResolvedNanoUsd, Math.round(4_000_000_000 / 3));
    assert.equal(g.medianLatencyMs, 1000);
    assert.deepEqual(g.errorClasses, { tests_failed: 1 });
    assert.equal(g.phases.length, 1);
    const h2 = r.groups[1]!;
    assert.equal(h2.scored, 1);
    assert.equal(h2.resolved, 0);
    assert.equal(h2.costPerResolvedNanoUsd, null);
    assert.deepEqual(h2.errorClasses, { harness_error: 1, grade_infra_failure: 1 });
  });

  it("totals are the sums of the groups; spend over time is cumulative and ordered", () => {
    const r = buildReport(sampleInput());
    assert.equal(r.totals.costNanoUsd, 5_000_000_000);
    assert.equal(r.totals.billableNanoUsd, 3_000_000_000);
    assert.equal(r.totals.calls, 13);
    assert.equal(r.totals.tokens.input, 200);
    assert.deepEqual(r.spendOverTime, [
      { atMs: 1000, totalNanoUsd: 2, billableNanoUsd: 2 },
      { atMs: 2000, totalNanoUsd: 5, billableNanoUsd: 3 },
    ]);
  });

  it("a ledger group with no attempt rows still shows its spend; an explicit k is used", () => {
    const input = sampleInput();
    const r = buildReport({
      ...input,
      k: 1,
      ledger: [...input.ledger, ledger({ harness: "(no attempt row)", model: "m9" })],
    });
    assert.equal(r.k, 1);
    const orphan = r.groups.find((g) => g.model === "m9")!;
    assert.equal(orphan.cells, 0);
    assert.equal(orphan.costNanoUsd, 4_000_000_000);
    assert.equal(orphan.resolvedRate, null);
  });
});
