/** The shapes the report is computed from (rows read from PostgreSQL, store/report.ts) and the report itself. Money is nano-USD. */

import type { InfraFailurePolicy } from "../protocol/config.js";
import type { AttemptRow, LedgerGroup, PhaseGroup, SpendBucket, Tokens } from "../store/report.js";
import type { SecurityEventRow } from "../store/security.js";
import type { AtK, TaskFigures } from "./task-stats.js";

export type { AttemptRow, LedgerGroup, PhaseGroup, SpendBucket, Tokens } from "../store/report.js";

export interface ReportInput {
  run: string;
  attempts: readonly AttemptRow[];
  ledger: readonly LedgerGroup[];
  phases: readonly PhaseGroup[];
  spend: readonly SpendBucket[];
  /** k for pass@k; default: the most repeats any task has. */
  k?: number;
  generatedAt?: string;
  /** forged messages the plane refused for this run (store/security.ts) */
  security?: readonly SecurityRefusal[];
  /** attempt rows per sandbox kind (container, process, simulated; `unknown` when the result did not say) */
  sandboxes?: Record<string, number>;
  /** what the run's config says about its figures (run_metadata) */
  runOptions?: RunOptions;
}

/** Run options every report states: how infrastructure failures count, and whether tasks were validated. */
export interface RunOptions {
  /** `apart` (default): out of the resolved rate; `as_failures`: scored as unresolved */
  infraFailures: InfraFailurePolicy;
  /** submitted with --unvalidated: its tasks were not all gold-validated */
  unvalidated: boolean;
}

/** One refusal as the report lists it: the stored row, without the run it belongs to. */
export type SecurityRefusal = Omit<SecurityEventRow, "runName"> & { createdAt: string };

export interface GroupReport {
  harness: string;
  model: string;
  /** run_results rows (one per cell). */
  cells: number;
  /** Attempts made: each row's attempt number + 1 (retries included). */
  attempts: number;
  retriedCells: number;
  /** Rows with an outcome (graded, judged, or failed before grading); pending and infra-failed grades are not. */
  scored: number;
  resolved: number;
  resolvedRate: number | null;
  /** 95% interval: Wilson without repeats, a task-clustered bootstrap with them (resolvedCiMethod) */
  resolvedCi95: { low: number; high: number } | null;
  resolvedCiMethod: TaskFigures["resolvedCiMethod"];
  meanSuccess: number | null;
  passAt1: number | null;
  passAtK: AtK;
  /** the probability that k repeats all resolve (reliability), with its interval */
  passHatK: AtK;
  /** how often repeats of one task disagree */
  flip: TaskFigures["flip"];
  costNanoUsd: number;
  billableNanoUsd: number;
  retriedSpendNanoUsd: number;
  calls: number;
  voidedCalls: number;
  costPerResolvedNanoUsd: number | null;
  tokens: Tokens;
  pacerWaitMs: number;
  medianLatencyMs: number | null;
  medianCallLatencyMs: number | null;
  errorClasses: Record<string, number>;
  /** Rows the environment ended (attempt or grade): not scored unless the run counts them as failures. */
  infraFailures: number;
  phases: Array<Omit<PhaseGroup, "harness" | "model">>;
}

export interface Report {
  run: string;
  generatedAt: string;
  k: number;
  groups: GroupReport[];
  totals: {
    cells: number;
    attempts: number;
    scored: number;
    resolved: number;
    costNanoUsd: number;
    billableNanoUsd: number;
    retriedSpendNanoUsd: number;
    calls: number;
    tokens: Tokens;
    infraFailures: number;
  };
  /** Cumulative ledger spend over time. */
  spendOverTime: Array<{ atMs: number; totalNanoUsd: number; billableNanoUsd: number }>;
  /** Forged messages refused: how many per check, and the first ones. */
  security: { total: number; byCheck: Record<string, number>; events: SecurityRefusal[] };
  /** Attempt rows per sandbox kind: `process` means the harness ran unsandboxed. */
  sandboxes: Record<string, number>;
  runOptions: RunOptions;
}
