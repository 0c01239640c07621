import { nanoToUsd } from "../../store/money.js";
import { table } from "../commands/output.js";
import type { GroupReport, Report } from "./types.js";

/** Text, CSV and JSON renderings of a report. Pure. */

/** Dollars for people: 4 decimals below $100, 2 above. Exact sums stay in CSV/JSON. */
export function usd(nano: number | null): string {
  if (nano === null) return "—";
  const v = nano / 1e9;
  return `$${Math.abs(v) >= 100 ? v.toFixed(2) : v.toFixed(4)}`;
}

const pct = (x: number | null) => (x === null ? "—" : `${(x * 100).toFixed(1)}%`);
const ms = (x: number | null) =>
  x === null ? "—" : x >= 10_000 ? `${(x / 1000).toFixed(1)}s` : `${Math.round(x)}ms`;
const int = (x: number) => x.toLocaleString("en-US");

export function rateWithCi(g: GroupReport): string {
  if (g.resolvedRate === null) return "—";
  const ci = g.resolvedCi95;
  return `${g.resolved}/${g.scored} ${pct(g.resolvedRate)}${ci ? ` [${pct(ci.low)}, ${pct(ci.high)}]` : ""}`;
}

export function errorsText(e: Record<string, number>): string {
  const parts = Object.entries(e).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  return parts.length === 0 ? "—" : parts.map(([k, v]) => `${k}:${v}`).join(" ");
}

export function formatTable(r: Report): string {
  // pass@k only says something beyond pass@1 when there is more than one attempt per task.
  const withK = r.k > 1;
  const main = table(
    [
      "Harness",
      "Model",
      "Cells",
      "Attempts",
      "Resolved [95% CI]",
      "pass@1",
      ...(withK ? [`pass@${r.k}`] : []),
      "Cost",
      "Billable",
      "Retried spend",
      "$/resolved",
      "Median latency",
    ],
    r.groups.map((g) => [
      g.harness,
      g.model,
      int(g.cells),
      int(g.attempts),
      rateWithCi(g),
      pct(g.passAt1),
      ...(withK ? [pct(g.passAtK.value)] : []),
      usd(g.costNanoUsd),
      usd(g.billableNanoUsd),
      usd(g.retriedSpendNanoUsd),
      usd(g.costPerResolvedNanoUsd),
      ms(g.medianLatencyMs),
    ]),
  );
  const tokens = table(
    [
      "Harness",
      "Model",
      "Calls",
      "Input",
      "Output",
      "Cache read",
      "Cache write",
      "Reasoning",
      "Pacer wait",
      "Errors",
    ],
    r.groups.map((g) => [
      g.harness,
      g.model,
      int(g.calls),
      int(g.tokens.input),
      int(g.tokens.output),
      int(g.tokens.cacheRead),
      int(g.tokens.cacheWrite),
      int(g.tokens.reasoning),
      ms(g.pacerWaitMs),
      errorsText(g.errorClasses),
    ]),
  );
  const phaseRows = r.groups.flatMap((g) =>
    g.phases.map((p) => [
      g.harness,
      g.model,
      p.phase,
      p.phaseModel ?? "",
      int(p.rows),
      usd(p.costNanoUsd),
      int(p.inputTokens),
      int(p.outputTokens),
    ]),
  );
  const t = r.totals;
  const out = [
    `Run ${r.run}: ${int(t.cells)} cells, ${int(t.attempts)} attempts, ${t.resolved}/${t.scored} resolved; ` +
      `spent ${usd(t.costNanoUsd)} (billable ${usd(t.billableNanoUsd)}, on retried attempts ${usd(t.retriedSpendNanoUsd)}) ` +
      `over ${int(t.calls)} calls`,
    "",
  ];
  if (r.groups.length === 0) out.push("(no attempt rows or ledger calls yet: the run's cells have not run)");
  else out.push(main, "", "Tokens by kind (ledger, retried attempts included):", tokens);
  if (phaseRows.length > 0)
    out.push(
      "",
      "Cost per phase:",
      table(["Harness", "Model", "Phase", "Phase model", "Rows", "Cost", "Input", "Output"], phaseRows),
    );
  return out.join("\n");
}

const CSV_HEADERS = [
  "harness",
  "model",
  "cells",
  "attempts",
  "retried_cells",
  "scored",
  "resolved",
  "resolved_rate",
  "resolved_ci95_low",
  "resolved_ci95_high",
  "mean_success",
  "pass_at_1",
  "k",
  "pass_at_k",
  "cost_usd",
  "billable_usd",
  "retried_spend_usd",
  "cost_per_resolved_usd",
  "calls",
  "voided_calls",
  "input_tokens",
  "output_tokens",
  "cache_read_tokens",
  "cache_write_tokens",
  "reasoning_tokens",
  "pacer_wait_ms",
  "median_latency_ms",
  "median_call_latency_ms",
  "error_classes",
];

/** RFC 4180 field: quoted when it holds a comma, quote or line break. */
export function csvField(v: string | number | null): string {
  const s = v === null ? "" : String(v);
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

export function formatCsv(r: Report): string {
  const rows = r.groups.map((g) =>
    [
      g.harness,
      g.model,
      g.cells,
      g.attempts,
      g.retriedCells,
      g.scored,
      g.resolved,
      g.resolvedRate,
      g.resolvedCi95?.low ?? null,
      g.resolvedCi95?.high ?? null,
      g.meanSuccess,
      g.passAt1,
      g.passAtK.k,
      g.passAtK.value,
      nanoToUsd(g.costNanoUsd),
      nanoToUsd(g.billableNanoUsd),
      nanoToUsd(g.retriedSpendNanoUsd),
      g.costPerResolvedNanoUsd === null ? null : nanoToUsd(g.costPerResolvedNanoUsd),
      g.calls,
      g.voidedCalls,
      g.tokens.input,
      g.tokens.output,
      g.tokens.cacheRead,
      g.tokens.cacheWrite,
      g.tokens.reasoning,
      g.pacerWaitMs,
      g.medianLatencyMs,
      g.medianCallLatencyMs,
      errorsText(g.errorClasses) === "—" ? "" : errorsText(g.errorClasses),
    ]
      .map(csvField)
      .join(","),
  );
  return `${[CSV_HEADERS.join(","), ...rows].join("\r\n")}\r\n`;
}

/** The report as JSON; money stays integer nano-USD (the `*NanoUsd` fields). */
export function formatJson(r: Report): string {
  return JSON.stringify(r);
}
