import { isInfraErrorClass } from "../protocol/retry.js";
import { meanPassAtK, median } from "./stats.js";
import { taskFigures } from "./task-stats.js";
import type {
  AttemptRow,
  GroupReport,
  LedgerGroup,
  Report,
  ReportInput,
  RunOptions,
  Tokens,
} from "./types.js";

const DEFAULT_RUN_OPTIONS: RunOptions = { infraFailures: "apart", unvalidated: false };

/*
 * The report as a pure function of rows read from the database: attempts (run_results), and the ledger and
 * phases already summed per group in SQL (exact NUMERIC sums). Nothing here estimates money: every figure is a
 * sum the database also gives.
 */

const zeroTokens = (): Tokens => ({ input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0 });
const FAILURE_STATUSES = new Set(["BUDGET_EXCEEDED", "MAX_TURNS_EXCEEDED", "TIMEOUT", "HARNESS_ERROR"]);
/** A judged (open-ended) attempt counts as resolved at this score or above. */
export const JUDGED_RESOLVED_SCORE = 0.5;

/** An outcome exists: graded, judged, or scored 0 without grading. Pending or infra-failed grades have none. */
export function isScored(a: AttemptRow): boolean {
  return a.success !== null || a.resolved !== null;
}

/** The environment ended the attempt or its grade: never the model's outcome (protocol/retry.ts). */
export function isInfraFailure(a: AttemptRow): boolean {
  return isInfraErrorClass(a.errorClass) || a.gradeStatus === "INFRA_FAILURE";
}

export function isResolved(a: AttemptRow): boolean {
  if (a.resolved !== null) return a.resolved;
  return a.gradeStatus === "JUDGED" && (a.success ?? 0) >= JUDGED_RESOLVED_SCORE;
}

/** Why an attempt did not succeed, or null when it did not fail (resolved, unresolved, or still pending). */
export function errorClassOf(a: AttemptRow): string | null {
  if (a.errorClass && a.errorClass !== "success" && a.errorClass !== "pending_grade") return a.errorClass;
  if (a.status && FAILURE_STATUSES.has(a.status)) return a.status.toLowerCase();
  return null;
}

const groupKey = (harness: string, model: string) => `${harness}\u0000${model}`;

export function buildReport(input: ReportInput): Report {
  const runOptions = { ...DEFAULT_RUN_OPTIONS, ...input.runOptions };
  // infra_failures: as_failures — an infrastructure failure is scored as an unresolved attempt.
  const scored = (a: AttemptRow) =>
    isScored(a) || (runOptions.infraFailures === "as_failures" && isInfraFailure(a));
  const byGroup = new Map<string, { harness: string; model: string; rows: AttemptRow[] }>();
  const touch = (harness: string, model: string) => {
    const key = groupKey(harness, model);
    let g = byGroup.get(key);
    if (!g) {
      g = { harness, model, rows: [] };
      byGroup.set(key, g);
    }
    return g;
  };
  for (const a of input.attempts) touch(a.harness, a.model).rows.push(a);
  const ledger = new Map<string, LedgerGroup>();
  for (const l of input.ledger) {
    touch(l.harness, l.model);
    ledger.set(groupKey(l.harness, l.model), l);
  }

  // k defaults to the most repeats any (harness, model, task) has: pass@k over the run's full repeat count.
  let maxRepeats = 1;
  const perTask = new Map<string, Map<string, { n: number; c: number }>>();
  for (const [key, g] of byGroup) {
    const tasks = new Map<string, { n: number; c: number }>();
    for (const a of g.rows) {
      if (!scored(a)) continue;
      const t = tasks.get(a.taskId) ?? { n: 0, c: 0 };
      t.n++;
      if (isResolved(a)) t.c++;
      tasks.set(a.taskId, t);
      maxRepeats = Math.max(maxRepeats, t.n);
    }
    perTask.set(key, tasks);
  }
  const k = input.k ?? maxRepeats;

  const groups: GroupReport[] = [];
  for (const [key, g] of byGroup) {
    const l = ledger.get(key);
    const scoredRows = g.rows.filter(scored);
    const resolved = scoredRows.filter(isResolved).length;
    const tasks = [...(perTask.get(key)?.values() ?? [])];
    const errorClasses: Record<string, number> = {};
    for (const a of g.rows) {
      const cls = errorClassOf(a);
      if (cls) errorClasses[cls] = (errorClasses[cls] ?? 0) + 1;
    }
    const p1 = meanPassAtK(tasks, 1);
    // Intervals clustered by task when there are repeats; pass@k, pass^k and the flip rate (report/task-stats.ts).
    const figures = taskFigures(tasks, k);
    const cost = l?.totalNanoUsd ?? 0;
    groups.push({
      harness: g.harness,
      model: g.model,
      cells: g.rows.length,
      attempts: g.rows.reduce((s, a) => s + a.attempt + 1, 0),
      retriedCells: g.rows.filter((a) => a.attempt > 0).length,
      scored: scoredRows.length,
      resolved,
      resolvedRate: scoredRows.length === 0 ? null : resolved / scoredRows.length,
      resolvedCi95: figures.resolvedCi95,
      resolvedCiMethod: figures.resolvedCiMethod,
      meanSuccess:
        scoredRows.length === 0
          ? null
          : scoredRows.reduce((s, a) => s + (a.success ?? 0), 0) / scoredRows.length,
      passAt1: p1.value,
      passAtK: figures.passAtK,
      passHatK: figures.passHatK,
      flip: figures.flip,
      costNanoUsd: cost,
      billableNanoUsd: l?.billableNanoUsd ?? 0,
      retriedSpendNanoUsd: l?.voidedNanoUsd ?? 0,
      calls: l?.calls ?? 0,
      voidedCalls: l?.voidedCalls ?? 0,
      costPerResolvedNanoUsd: resolved === 0 ? null : Math.round(cost / resolved),
      tokens: l ? { ...l.tokens } : zeroTokens(),
      pacerWaitMs: l?.pacerWaitMs ?? 0,
      medianLatencyMs: median(g.rows.map((a) => a.latencyMs)),
      medianCallLatencyMs: l?.medianCallLatencyMs ?? null,
      errorClasses,
      infraFailures: g.rows.filter(isInfraFailure).length,
      phases: input.phases
        .filter((p) => p.harness === g.harness && p.model === g.model)
        .map(({ harness: _h, model: _m, ...rest }) => rest),
    });
  }
  groups.sort((a, b) => a.harness.localeCompare(b.harness) || a.model.localeCompare(b.model));

  const tokens = zeroTokens();
  for (const g of groups)
    for (const kind of Object.keys(tokens) as (keyof Tokens)[]) tokens[kind] += g.tokens[kind];
  const sum = (f: (g: GroupReport) => number) => groups.reduce((s, g) => s + f(g), 0);

  let total = 0;
  let billable = 0;
  const spendOverTime = [...input.spend]
    .sort((a, b) => a.atMs - b.atMs)
    .map((b) => {
      total += b.totalNanoUsd;
      billable += b.billableNanoUsd;
      return { atMs: b.atMs, totalNanoUsd: total, billableNanoUsd: billable };
    });

  return {
    run: input.run,
    generatedAt: input.generatedAt ?? new Date().toISOString(),
    k,
    groups,
    totals: {
      cells: sum((g) => g.cells),
      attempts: sum((g) => g.attempts),
      scored: sum((g) => g.scored),
      resolved: sum((g) => g.resolved),
      costNanoUsd: sum((g) => g.costNanoUsd),
      billableNanoUsd: sum((g) => g.billableNanoUsd),
      retriedSpendNanoUsd: sum((g) => g.retriedSpendNanoUsd),
      calls: sum((g) => g.calls),
      tokens,
      infraFailures: sum((g) => g.infraFailures),
    },
    spendOverTime,
    security: {
      total: input.security?.length ?? 0,
      byCheck: countBy(input.security ?? [], (e) => e.check),
      events: [...(input.security ?? [])].slice(0, 20),
    },
    sandboxes: { ...(input.sandboxes ?? {}) },
    runOptions,
  };
}

function countBy<T>(items: readonly T[], key: (t: T) => string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const i of items) out[key(i)] = (out[key(i)] ?? 0) + 1;
  return out;
}
