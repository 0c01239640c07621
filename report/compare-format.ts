import type { Interval } from "./bootstrap.js";
import type { CompareReport, Comparison } from "./compare.js";
import { usd } from "./format.js";

/** `evalfleet compare` as text: one block per comparison. Pure. */

const pct = (x: number | null) => (x === null ? "—" : `${(x * 100).toFixed(1)}%`);
const points = (x: number | null) => (x === null ? "—" : `${x >= 0 ? "+" : ""}${(x * 100).toFixed(1)}`);
const ci = (i: Interval | null, f: (v: number | null) => string) =>
  i ? ` [95% CI ${f(i.low)}, ${i.high === null ? "unbounded" : f(i.high)}]` : "";
const p = (v: number) => (v < 0.001 ? "p < 0.001" : `p = ${v.toFixed(3)}`);

function block(c: Comparison): string[] {
  const { a, b } = c;
  const lines = [
    `${a.label}  vs  ${b.label}`,
    `  paired on ${c.pairedTasks} task(s)${
      c.unpairedTasks.onlyA + c.unpairedTasks.onlyB > 0
        ? ` (left out: ${c.unpairedTasks.onlyA} scored only by ${a.label}, ${c.unpairedTasks.onlyB} only by ${b.label})`
        : ""
    }`,
  ];
  if (c.pairedTasks === 0)
    return [...lines, "  nothing to compare: no task has an outcome on both sides yet"];
  lines.push(
    `  resolved: ${a.resolved}/${a.scored} ${pct(a.rate)}  vs  ${b.resolved}/${b.scored} ${pct(b.rate)}`,
    `  difference (A − B): ${points(c.difference.value)} points${ci(c.difference.ci95, points)} (paired task bootstrap)`,
    `  per task: A wins ${c.perTask.wins}, loses ${c.perTask.losses}, ties ${c.perTask.ties}`,
    `  McNemar exact test: ${c.mcnemar.pairs} attempt pairs, A only ${c.mcnemar.aOnly}, B only ${c.mcnemar.bOnly}, ` +
      `both ${c.mcnemar.both}, neither ${c.mcnemar.neither}: ${p(c.mcnemar.pValue)}`,
    `  $/resolved: ${usd(a.costPerResolved.valueNanoUsd)}${ci(a.costPerResolved.ci95, usdOrDash)}  vs  ` +
      `${usd(b.costPerResolved.valueNanoUsd)}${ci(b.costPerResolved.ci95, usdOrDash)}`,
  );
  for (const w of c.warnings) lines.push(`  warning: ${w}`);
  return lines;
}

const usdOrDash = (v: number | null) => usd(v === null ? null : Math.round(v));

export function formatCompare(r: CompareReport): string {
  const head = `Compare ${r.runs.join(" and ")} by ${r.by}: ${r.comparisons.length} comparison(s)`;
  if (r.comparisons.length === 0)
    return `${head}\n(nothing to pair: one ${r.by === "model" ? "model" : "harness"} only — try --by ${
      r.by === "model" ? "harness" : "model"
    }, or name a second run)`;
  return [head, "", ...r.comparisons.flatMap((c) => [...block(c), ""])].join("\n").trimEnd();
}
