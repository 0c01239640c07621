/** The shapes the report is computed from (rows read from PostgreSQL) and the report itself. Money is nano-USD. */

/** One run_results row: the latest attempt of one cell. */
export interface AttemptRow {
  cellId: string;
  harness: string;
  model: string;
  taskId: string;
  repeat: number | null;
  attempt: number;
  status: string | null;
  gradeStatus: string | null;
  resolved: boolean | null;
  /** Partial credit, or the judge's score; NULL while the attempt has no outcome yet (grade pending, infra). */
  success: number | null;
  errorClass: string | null;
  latencyMs: number | null;
}

/** Token counts by kind. */
export interface Tokens {
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
  reasoning: number;
}

/** ledger_calls summed per harness × model (every row, voided ones included, is money spent). */
export interface LedgerGroup {
  harness: string;
  model: string;
  calls: number;
  voidedCalls: number;
  totalNanoUsd: number;
  billableNanoUsd: number;
  /** Spend on calls of superseded (retried) attempts: the voided rows. */
  voidedNanoUsd: number;
  tokens: Tokens;
  pacerWaitMs: number;
  medianCallLatencyMs: number | null;
}

/** phase_results summed per harness × model × phase. */
export interface PhaseGroup {
  harness: string;
  model: string;
  phase: string;
  phaseModel: string | null;
  rows: number;
  costNanoUsd: number;
  inputTokens: number;
  outputTokens: number;
}

/** Ledger spend in one time bucket (not cumulative). */
export interface SpendBucket {
  atMs: number;
  totalNanoUsd: number;
  billableNanoUsd: number;
}

export interface ReportInput {
  run: string;
  attempts: readonly AttemptRow[];
  ledger: readonly LedgerGroup[];
  phases: readonly PhaseGroup[];
  spend: readonly SpendBucket[];
  /** k for pass@k; default: the most repeats any task has. */
  k?: number;
  generatedAt?: string;
}

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
  resolvedCi95: { low: number; high: number } | null;
  meanSuccess: number | null;
  passAt1: number | null;
  passAtK: { k: number; value: number | null; tasks: number; excludedTasks: number };
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
  };
  /** Cumulative ledger spend over time. */
  spendOverTime: Array<{ atMs: number; totalNanoUsd: number; billableNanoUsd: number }>;
}
