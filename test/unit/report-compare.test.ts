import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { EvalfleetError } from "../../protocol/errors.js";
import { buildComparisons } from "../../report/compare.js";
import { formatCompare } from "../../report/compare-format.js";
import { mcnemarExact, winsLossesTies } from "../../report/paired.js";
import type { CompareInput, CompareRow, RunEnvironment } from "../../store/compare.js";
import { attempt } from "./report-fixtures.js";

function row(
  p: Partial<CompareRow> & { harness: string; taskId: string; repeat: number; ok: boolean | null },
): CompareRow {
  const { ok, ...rest } = p;
  return {
    ...attempt({
      cellId: `${p.harness}__${p.model ?? "m1"}__${p.taskId}__r${p.repeat}`,
      resolved: ok,
      success: ok === null ? null : ok ? 1 : 0,
      gradeStatus: ok === null ? "PENDING" : ok ? "FULL" : "NO",
      ...rest,
    }),
    costNanoUsd: p.costNanoUsd ?? 1_000_000,
    sandbox: p.sandbox ?? "container",
  };
}

const env = (run: string, config: Record<string, unknown> = {}): RunEnvironment => ({
  run,
  config: { harnesses: [{ name: "h1", adapter: "command", version: "1" }], max_turns: 50, ...config },
  evalfleetVersion: "0.1.0",
  dockerImage: null,
  priceVersions: ["p1"],
});

/** h1 resolves tasks 0..7 in both repeats; h2 only tasks 0..1; task 9 pending on h2. */
function oneRun(): CompareInput {
  const rows: CompareRow[] = [];
  for (let t = 0; t < 10; t++)
    for (const r of [0, 1]) {
      rows.push(row({ harness: "h1", taskId: `t${t}`, repeat: r, ok: t < 8, costNanoUsd: 2_000_000 }));
      rows.push(row({ harness: "h2", taskId: `t${t}`, repeat: r, ok: t === 9 ? null : t < 2 }));
    }
  return { rows, env: env("one") };
}

describe("compare: paired statistics", () => {
  it("McNemar's exact test", () => {
    assert.equal(mcnemarExact(0, 5), 2 / 32);
    assert.ok(Math.abs(mcnemarExact(1, 9) - (2 * (1 + 10)) / 1024) < 1e-15);
    assert.equal(mcnemarExact(9, 1), mcnemarExact(1, 9));
    assert.equal(mcnemarExact(4, 4), 1);
    assert.equal(mcnemarExact(0, 0), 1);
    const big = mcnemarExact(1200, 1300);
    assert.ok(big > 0 && big < 0.05, `no underflow at n = 2500: ${big}`);
    assert.throws(() => mcnemarExact(-1, 2), RangeError);
  });

  it("one run, by harness: wins, McNemar pairs, the paired bootstrap, $/resolved", () => {
    const r = buildComparisons([oneRun()], { generatedAt: "x" });
    assert.equal(r.comparisons.length, 1);
    const c = r.comparisons[0]!;
    assert.deepEqual([c.a.label, c.b.label], ["h1 / m1", "h2 / m1"]);
    assert.equal(c.pairedTasks, 9, "task 9 has no outcome on h2");
    assert.deepEqual(c.unpairedTasks, { onlyA: 1, onlyB: 0 });
    assert.deepEqual(c.perTask, { wins: 6, losses: 0, ties: 3 });
    assert.deepEqual(
      { ...c.mcnemar, pValue: 0 },
      { pairs: 18, aOnly: 12, bOnly: 0, both: 4, neither: 2, pValue: 0 },
    );
    assert.equal(c.mcnemar.pValue, mcnemarExact(12, 0));
    assert.ok(Math.abs(c.difference.value! - (16 / 18 - 4 / 18)) < 1e-12);
    const ci = c.difference.ci95!;
    assert.ok(ci.low > 0 && ci.low <= c.difference.value! && c.difference.value! <= ci.high!);
    assert.equal(c.a.costPerResolved.valueNanoUsd, Math.round((18 * 2_000_000) / 16));
    assert.ok(c.a.costPerResolved.ci95!.low <= c.a.costPerResolved.valueNanoUsd!);
    assert.deepEqual(c.warnings, []);
    const text = formatCompare(r);
    assert.match(
      text,
      /McNemar exact test: 18 attempt pairs, A only 12, B only 0, both 4, neither 2: p < 0\.001/,
    );
    assert.match(
      text,
      /difference \(A − B\): \+66\.7 points \[95% CI \+\d+\.\d, \+\d+\.\d\] \(paired task bootstrap\)/,
    );
    assert.match(text, /per task: A wins 6, loses 0, ties 3/);
  });

  it("two runs are matched on harness × model and warned about caps, versions, images and sandboxes", () => {
    const a = oneRun();
    const b: CompareInput = {
      rows: oneRun().rows.map((x) => ({ ...x, sandbox: "process" })),
      env: {
        ...env("two", { max_turns: 20, harnesses: [{ name: "h1", adapter: "command", version: "2" }] }),
        dockerImage: "img@sha256:1",
        priceVersions: ["p2"],
      },
    };
    const r = buildComparisons([a, b], { generatedAt: "x" });
    assert.equal(r.by, "harness × model");
    assert.deepEqual(
      r.comparisons.map((c) => [c.a.label, c.b.label]),
      [
        ["one: h1 / m1", "two: h1 / m1"],
        ["one: h2 / m1", "two: h2 / m1"],
      ],
    );
    const w = r.comparisons[0]!.warnings.join("\n");
    assert.match(w, /caps \(max_turns\) differ: 50 \(one: h1 \/ m1\) vs 20 \(two: h1 \/ m1\)/);
    assert.match(w, /harness versions \(h1\) differ: "command 1" .* vs "command 2"/);
    assert.match(w, /images differ/);
    assert.match(w, /price data versions differ/);
    assert.match(w, /sandboxes differ: \["container"\] .* vs \["process"\]/);
    assert.equal(r.comparisons[0]!.perTask.ties, 10, "identical outcomes: all ties");
  });

  it("two runs with one arm each and no shared harness are compared directly; otherwise --by is asked for", () => {
    const x: CompareInput = { rows: oneRun().rows.filter((r) => r.harness === "h1"), env: env("x") };
    const y: CompareInput = { rows: oneRun().rows.filter((r) => r.harness === "h2"), env: env("y") };
    assert.equal(buildComparisons([x, y]).comparisons.length, 1);
    assert.throws(
      () => buildComparisons([x, { ...y, rows: [...y.rows, ...y.rows.map((r) => ({ ...r, model: "m2" }))] }]),
      (e: unknown) => e instanceof EvalfleetError && /--by harness/.test(e.message),
    );
    const byModel = buildComparisons([x, y], { by: "model" });
    assert.equal(byModel.comparisons[0]!.pairedTasks, 9);
  });

  it("wins, losses and ties compare shares of repeats exactly", () => {
    assert.deepEqual(
      winsLossesTies([
        { taskId: "a", a: { n: 3, c: 1 }, b: { n: 2, c: 1 }, costA: 0, costB: 0 },
        { taskId: "b", a: { n: 2, c: 1 }, b: { n: 4, c: 2 }, costA: 0, costB: 0 },
        { taskId: "c", a: { n: 1, c: 1 }, b: { n: 3, c: 2 }, costA: 0, costB: 0 },
      ]),
      { wins: 1, losses: 1, ties: 1 },
    );
  });
});
