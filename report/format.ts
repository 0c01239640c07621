import { table } from "../lib/table.js";
import { nanoToUsd } from "../protocol/money.js";
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

/** pass@k or pass^k with its interval. */
export function atKWithCi(a: GroupReport["passAtK"]): string {
  if (a.value === null) return "—";
  return `${pct(a.value)}${a.ci95 ? ` [${pct(a.ci95.low)}, ${pct(a.ci95.high)}]` : ""}`;
}

/** Says how the intervals were made, when any came from the task bootstrap. */
export function intervalNote(r: Report): string[] {
  if (!r.groups.some((g) => g.resolvedCiMethod === "task-bootstrap")) return [];
  return [
    "",
    "95% intervals: task-clustered bootstrap (whole tasks resampled, 2,000 times, seeded): repeats of one task are",
    `not independent. pass^${r.k}: all ${r.k} repeats resolve. Flip: how often two repeats of a task disagree.`,
  ];
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
      ...(withK ? [`pass@${r.k} [95% CI]`, `pass^${r.k}`, "Flip"] : []),
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
      ...(withK ? [atKWithCi(g.passAtK), pct(g.passHatK.value), pct(g.flip.rate)] : []),
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
  else out.push(main, ...intervalNote(r), "", "Tokens by kind (ledger, retried attempts included):", tokens);
  if (phaseRows.length > 0)
    out.push(
      "",
      "Cost per phase:",
      table(["Harness", "Model", "Phase", "Phase model", "Rows", "Cost", "Input", "Output"], phaseRows),
    );
  out.push(...runOptionLines(r), ...sandboxLines(r), ...securityLines(r));
  return out.join("\n");
}

/** Infrastructure failures, counted apart (or as failures when the run says so), and an unvalidated run. */
export function runOptionLines(r: Report): string[] {
  const lines: string[] = [];
  const n = r.totals.infraFailures;
  if (n > 0 || r.runOptions.infraFailures === "as_failures")
    lines.push(
      "",
      `Infrastructure failures: ${int(n)} (image pull, container start, disk, exhausted 429s, provider spend limits, ` +
        "tasks that never started, grading's environment) — " +
        (r.runOptions.infraFailures === "as_failures"
          ? "COUNTED AS FAILURES in the resolved rate (infra_failures: as_failures)"
          : "not the model's: kept out of the resolved rate (infra_failures: as_failures would count them)"),
    );
  if (r.runOptions.unvalidated)
    lines.push(
      "",
      "UNVALIDATED: this run was submitted with --unvalidated; some of its tasks were not gold-validated " +
        "(evalfleet validate-env), so a task that measures nothing may be in these figures.",
    );
  return lines;
}

/** How the harnesses were isolated; an unsandboxed attempt is said plainly. */
export function sandboxLines(r: Report): string[] {
  const s = r.sandboxes;
  const parts = Object.entries(s)
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(
      ([k, n]) =>
        `${int(n)} ${k === "container" ? "in containers" : k === "process" ? "UNSANDBOXED (plain processes)" : k}`,
    );
  if (parts.length === 0) return [];
  const lines = ["", `Sandbox: ${parts.join(", ")}`];
  if ((s.process ?? 0) > 0)
    lines.push(
      "  UNSANDBOXED: those harnesses ran as processes of this machine's user, with its files, network and process",
      "  list in reach (no container runtime answered). Start Docker or Podman to run every attempt in a container.",
    );
  return lines;
}

/** Forged messages the plane refused for this run. */
export function securityLines(r: Report): string[] {
  const sec = r.security;
  if (sec.total === 0) return ["", "Security: no forged results, ledger calls or blob references were seen"];
  const lines = [
    "",
    `Security: ${int(sec.total)} forged messages refused (${Object.entries(sec.byCheck)
      .map(([k, n]) => `${k} ${int(n)}`)
      .join(", ")})`,
  ];
  for (const e of sec.events.slice(0, 10)) lines.push(`  ${e.createdAt} ${e.actor}: ${e.detail}`);
  if (sec.total > 10) lines.push(`  … and ${int(sec.total - 10)} more (report --format json lists 20)`);
  return lines;
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
  "resolved_ci_method",
  "pass_at_k_ci95_low",
  "pass_at_k_ci95_high",
  "pass_hat_k",
  "pass_hat_k_ci95_low",
  "pass_hat_k_ci95_high",
  "flip_rate",
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
      g.resolvedCiMethod,
      g.passAtK.ci95?.low ?? null,
      g.passAtK.ci95?.high ?? null,
      g.passHatK.value,
      g.passHatK.ci95?.low ?? null,
      g.passHatK.ci95?.high ?? null,
      g.flip.rate,
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
