import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { buildReport } from "../../report/aggregate.js";
import { clusterBootstrap, quantile, seededRandom } from "../../report/bootstrap.js";
import { flipRate, passHatK, pooledRate, wilson } from "../../report/stats.js";
import type { AttemptRow } from "../../report/types.js";
import { attempt } from "./report-fixtures.js";

/** `tasks` tasks × `repeats` repeats; task i resolves in repeat r when `resolved(i, r)`. */
function rows(tasks: number, repeats: number, resolved: (i: number, r: number) => boolean): AttemptRow[] {
  const out: AttemptRow[] = [];
  for (let i = 0; i < tasks; i++)
    for (let r = 0; r < repeats; r++) {
      const ok = resolved(i, r);
      out.push(
        attempt({
          cellId: `h1__m1__t${i}__r${r}`,
          taskId: `t${i}`,
          repeat: r,
          resolved: ok,
          success: ok ? 1 : 0,
          gradeStatus: ok ? "FULL" : "NO",
        }),
      );
    }
  return out;
}

const report = (attempts: AttemptRow[]) =>
  buildReport({ run: "r", attempts, ledger: [], phases: [], spend: [], generatedAt: "x" });

describe("task-clustered statistics", () => {
  it("with repeats, the resolved interval is clustered by task: wider than pooling repeats as independent", () => {
    // Ten tasks, five repeats: half the tasks always resolve, half never. Pooled that is 25 of 50, but only ten
    // independent tasks back it.
    const g = report(rows(10, 5, (i) => i < 5)).groups[0]!;
    assert.equal(g.resolvedCiMethod, "task-bootstrap");
    const naive = wilson(25, 50)!;
    const ci = g.resolvedCi95!;
    assert.ok(ci.low < naive.low - 0.05 && ci.high > naive.high + 0.05, JSON.stringify({ ci, naive }));
    assert.ok(ci.low <= 0.5 && ci.high >= 0.5);
  });

  it("without repeats the interval stays Wilson's", () => {
    const g = report(rows(20, 1, (i) => i % 4 === 0)).groups[0]!;
    assert.equal(g.resolvedCiMethod, "wilson");
    assert.deepEqual(g.resolvedCi95, wilson(5, 20));
  });

  it("is seeded: the same rows give the same intervals every time", () => {
    const a = report(rows(12, 3, (i, r) => (i * 7 + r) % 3 === 0)).groups[0]!;
    const b = report(rows(12, 3, (i, r) => (i * 7 + r) % 3 === 0)).groups[0]!;
    assert.deepEqual(
      [a.resolvedCi95, a.passAtK.ci95, a.passHatK.ci95],
      [b.resolvedCi95, b.passAtK.ci95, b.passHatK.ci95],
    );
    const u = seededRandom(1);
    const v = seededRandom(1);
    for (let i = 0; i < 5; i++) assert.equal(u(), v());
  });

  it("pass@k and pass^k carry task-bootstrap intervals around their values", () => {
    const g = report(rows(10, 4, (i, r) => r < i % 5)).groups[0]!;
    for (const x of [g.passAtK, g.passHatK]) {
      assert.equal(x.k, 4);
      assert.ok(x.value !== null && x.ci95 !== null);
      assert.ok(x.ci95.low <= x.value && x.value <= (x.ci95.high ?? 1), JSON.stringify(x));
      assert.ok(x.ci95.high! > x.ci95.low, "a real spread");
    }
    assert.ok(g.passAtK.value! >= g.passHatK.value!, "pass@k ≥ pass^k");
  });

  it("pass^k: all k of n repeats resolve", () => {
    assert.equal(passHatK(5, 5, 3), 1);
    assert.ok(Math.abs(passHatK(5, 3, 3) - (3 * 2 * 1) / (5 * 4 * 3)) < 1e-15);
    assert.equal(passHatK(5, 2, 3), 0);
    assert.equal(passHatK(4, 2, 1), 0.5);
    assert.ok(Number.isNaN(passHatK(2, 2, 3)));
    assert.throws(() => passHatK(2, 3, 1), RangeError);
  });

  it("flip rate: how often two repeats of a task disagree", () => {
    assert.deepEqual(flipRate([{ n: 4, c: 2 }]), {
      rate: (2 * 2 * 2) / (4 * 3),
      mixedTasks: 1,
      tasksWithRepeats: 1,
    });
    assert.deepEqual(
      flipRate([
        { n: 3, c: 3 },
        { n: 3, c: 0 },
        { n: 1, c: 1 },
      ]),
      { rate: 0, mixedTasks: 0, tasksWithRepeats: 2 },
    );
    assert.equal(flipRate([{ n: 1, c: 0 }]).rate, null);
    const g = report(rows(4, 2, (i, r) => i === 0 || (i === 1 && r === 0))).groups[0]!;
    assert.deepEqual(g.flip, { rate: 0.25, mixedTasks: 1, tasksWithRepeats: 4 });
  });

  it("helpers: quantiles, an unbounded statistic, no units", () => {
    assert.equal(quantile([1, 2, 3, 4], 0.5), 2.5);
    assert.equal(clusterBootstrap([], pooledRate), null);
    const ci = clusterBootstrap([{ c: 0 }, { c: 1 }], (s) => 1 / s.reduce((a, t) => a + t.c, 0));
    assert.equal(ci?.high, null, "unbounded above when some resamples resolve nothing");
  });
});
