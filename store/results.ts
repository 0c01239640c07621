import { type Col, chunkRows, insertBatched } from "./batch.js";
import type { Db } from "./db.js";
import { quote } from "./migrations/types.js";
import { nanoToNumber, usdToNano, usdToNanoNumber } from "./money.js";

export * from "./ledger.js";

/*
 * The queries every other part uses against the results store. All are idempotent: re-delivering the same
 * message and re-running the same call leaves the same rows. Money crosses this boundary as integer nano-USD.
 */

export type CellStatus = "pending" | "running" | "completed" | "failed" | "skipped";
export type CostMode = "platform" | "subscription";

// ---- run metadata -------------------------------------------------------------------------------------------

export interface RunMetadata {
  runName: string;
  /** The full run config (object or its JSON text). */
  config: unknown;
  /** evalfleet's version; stored in the seed's `harness_evaluator_version` column. */
  version: string;
  dockerImage?: string | null;
  createdAt?: Date | string;
}

/** Saves (or refreshes, on resubmit) the run's config; created_at keeps its first value. */
export async function saveRunMetadata(db: Db, m: RunMetadata): Promise<void> {
  const created =
    m.createdAt instanceof Date ? m.createdAt.toISOString() : (m.createdAt ?? new Date().toISOString());
  await db.query(
    `INSERT INTO run_metadata (run_name, config_json, harness_evaluator_version, docker_image, created_at)
     VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (run_name) DO UPDATE SET config_json = EXCLUDED.config_json,
       harness_evaluator_version = EXCLUDED.harness_evaluator_version, docker_image = EXCLUDED.docker_image`,
    [
      m.runName,
      typeof m.config === "string" ? m.config : JSON.stringify(m.config),
      m.version,
      m.dockerImage ?? null,
      created,
    ],
  );
}

export async function getRunMetadata(
  db: Db,
  runName: string,
): Promise<{
  runName: string;
  configJson: string;
  version: string | null;
  dockerImage: string | null;
} | null> {
  const r = await db.query<{
    config_json: string;
    harness_evaluator_version: string | null;
    docker_image: string | null;
  }>("SELECT config_json, harness_evaluator_version, docker_image FROM run_metadata WHERE run_name = $1", [
    runName,
  ]);
  const row = r.rows[0];
  return row
    ? {
        runName,
        configJson: row.config_json,
        version: row.harness_evaluator_version,
        dockerImage: row.docker_image,
      }
    : null;
}

// ---- run_state ----------------------------------------------------------------------------------------------

/**
 * One `pending` run_state row per cell; cells already present (any status) are left alone, so re-planning a run
 * never resets progress. Multi-row INSERTs with the run name bound once and one parameter per cell, chunked
 * under the parameter limit, in one transaction. Returns how many rows were new.
 */
export async function insertPendingCells(
  db: Db,
  runName: string,
  cells: readonly (string | { cellId: string })[],
): Promise<number> {
  if (cells.length === 0) return 0;
  const ids = cells.map((c) => (typeof c === "string" ? c : c.cellId));
  const batches = chunkRows(ids, 1, 1);
  const write = async (tx: Db) => {
    let inserted = 0;
    for (const batch of batches) {
      const tuples = batch.map((_, i) => `($1,$${i + 2},'pending')`).join(",");
      const r = await tx.query(
        `INSERT INTO run_state (run_name, cell_id, status) VALUES ${tuples} ON CONFLICT (run_name, cell_id) DO NOTHING`,
        [runName, ...batch],
      );
      inserted += r.rowCount;
    }
    return inserted;
  };
  return batches.length === 1 ? write(db) : db.transaction(write);
}

/** The run's cells whose run_state is `completed` (resume skips these). */
export async function getCompletedCells(db: Db, runName: string): Promise<Set<string>> {
  const r = await db.query<{ cell_id: string }>(
    "SELECT cell_id FROM run_state WHERE run_name = $1 AND status = 'completed'",
    [runName],
  );
  return new Set(r.rows.map((x) => x.cell_id));
}

/**
 * Sets a cell's status (creating the row if needed). `running` stamps started_at; completed/failed/skipped
 * stamp completed_at. A `completed` cell is never demoted: a late or redelivered `running` after completion is
 * ignored, so resume stays correct. Returns whether the row changed.
 */
export async function setCellStatus(
  db: Db,
  runName: string,
  cellId: string,
  status: CellStatus,
  opts: { error?: string | null; at?: Date } = {},
): Promise<boolean> {
  const at = (opts.at ?? new Date()).toISOString();
  const started = status === "running" ? at : null;
  const finished = status === "completed" || status === "failed" || status === "skipped" ? at : null;
  const r = await db.query(
    `INSERT INTO run_state AS s (run_name, cell_id, status, started_at, completed_at, error)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (run_name, cell_id) DO UPDATE SET status = EXCLUDED.status,
       started_at = COALESCE(EXCLUDED.started_at, s.started_at),
       completed_at = CASE WHEN EXCLUDED.status IN ('pending', 'running') THEN NULL ELSE EXCLUDED.completed_at END,
       error = EXCLUDED.error
     WHERE s.status IS DISTINCT FROM 'completed' OR EXCLUDED.status = 'completed'`,
    [runName, cellId, status, started, finished, opts.error ?? null],
  );
  return r.rowCount > 0;
}

export async function getCellStatuses(db: Db, runName: string): Promise<Record<CellStatus | string, number>> {
  const r = await db.query<{ status: string; n: number }>(
    "SELECT status, count(*) AS n FROM run_state WHERE run_name = $1 GROUP BY status",
    [runName],
  );
  return Object.fromEntries(r.rows.map((x) => [x.status, x.n]));
}

// ---- run_results (one row per cell: the latest attempt) -----------------------------------------------------

export interface AttemptResultRow {
  runName: string;
  cellId: string;
  /** Which attempt produced this row; a lower attempt never overwrites a higher one. */
  attempt: number;
  harness?: string | null;
  model?: string | null;
  taskId?: string | null;
  track?: string | null;
  repeat?: number | null;
  exitClass?: string | null;
  success?: number | null;
  errorClass?: string | null;
  errorMessage?: string | null;
  inputTokens?: number | null;
  outputTokens?: number | null;
  cacheReadTokens?: number | null;
  cacheWriteTokens?: number | null;
  reasoningTokens?: number | null;
  /** run_results.total_cost (USD NUMERIC) as nano-USD. */
  totalCostNanoUsd?: number | bigint | null;
  latencyMs?: number | null;
  timeToFirstAttemptMs?: number | null;
  numApiCalls?: number | null;
  numToolCalls?: number | null;
  diff?: string | null;
  testOutput?: string | null;
  /** JSON (object or text) kept in the seed's TEXT column. */
  harnessMetadata?: unknown;
  harnessStdout?: string | null;
  harnessStderr?: string | null;
  timestamp?: string | null;
  retryCount?: number | null;
  /** NULL counts as billable. */
  costMode?: CostMode | null;
  status?: string | null;
  traceId?: string | null;
  reviewModel?: string | null;
  billableCostNanoUsd?: number | bigint | null;
  patchHash?: string | null;
  patchRef?: string | null;
  trajectoryRef?: string | null;
  gradeStatus?: string | null;
  resolved?: boolean | null;
  gradeReport?: unknown;
  gradedAt?: Date | string | null;
  verdictScore?: number | null;
  verdict?: unknown;
}

type AR = AttemptResultRow;
const c = <R>(field: keyof R & string, column: string, kind: Col<R>["kind"]): Col<R> => ({
  field,
  column,
  kind,
});

export const ATTEMPT_COLUMNS: readonly Col<AR>[] = [
  c("runName", "run_name", "text"),
  c("cellId", "cell_id", "text"),
  c("attempt", "attempt", "int"),
  c("harness", "harness", "text"),
  c("model", "model", "text"),
  c("taskId", "task_id", "text"),
  c("track", "track", "text"),
  c("repeat", "repeat", "int"),
  c("exitClass", "exit_class", "text"),
  c("success", "success", "float"),
  c("errorClass", "error_class", "text"),
  c("errorMessage", "error_message", "text"),
  c("inputTokens", "input_tokens", "bigint"),
  c("outputTokens", "output_tokens", "bigint"),
  c("cacheReadTokens", "cache_read_tokens", "bigint"),
  c("cacheWriteTokens", "cache_write_tokens", "bigint"),
  c("reasoningTokens", "reasoning_tokens", "bigint"),
  c("totalCostNanoUsd", "total_cost", "usd"),
  c("latencyMs", "latency_ms", "float"),
  c("timeToFirstAttemptMs", "time_to_first_attempt_ms", "float"),
  c("numApiCalls", "num_api_calls", "int"),
  c("numToolCalls", "num_tool_calls", "int"),
  c("diff", "diff", "text"),
  c("testOutput", "test_output", "text"),
  c("harnessMetadata", "harness_metadata", "jsontext"),
  c("harnessStdout", "harness_stdout", "text"),
  c("harnessStderr", "harness_stderr", "text"),
  c("timestamp", "timestamp", "text"),
  c("retryCount", "retry_count", "int"),
  c("costMode", "cost_mode", "text"),
  c("status", "status", "text"),
  c("traceId", "trace_id", "text"),
  c("reviewModel", "review_model", "text"),
  c("billableCostNanoUsd", "billable_cost", "usd"),
  c("patchHash", "patch_hash", "text"),
  c("patchRef", "patch_ref", "text"),
  c("trajectoryRef", "trajectory_ref", "text"),
  c("gradeStatus", "grade_status", "text"),
  c("resolved", "resolved", "bool"),
  c("gradeReport", "grade_report", "json"),
  c("gradedAt", "graded_at", "ts"),
  c("verdictScore", "verdict_score", "float"),
  c("verdict", "verdict", "json"),
];

// A newer attempt replaces the whole row (stale grade/verdict fields clear); the same attempt merges, so a
// redelivered result or a later partial write (a grade) never erases what is already there.
const ATTEMPT_SET = ATTEMPT_COLUMNS.filter((x) => !["run_name", "cell_id"].includes(x.column))
  .map(({ column }) => {
    const q = quote(column);
    return column === "attempt"
      ? `${q} = EXCLUDED.${q}`
      : `${q} = CASE WHEN EXCLUDED.attempt > r.attempt THEN EXCLUDED.${q} ELSE COALESCE(EXCLUDED.${q}, r.${q}) END`;
  })
  .join(",\n  ");

/**
 * Lands attempt results, batched. ON CONFLICT (run_name, cell_id) updates only when the incoming attempt is >= the
 * stored one. Several rows for one cell in one call are applied in order. Returns rows inserted or updated.
 */
export async function upsertAttemptResults(db: Db, rows: readonly AttemptResultRow[]): Promise<number> {
  if (rows.length === 0) return 0;
  // One statement cannot touch a row twice; the k-th occurrence of a cell goes in round k.
  const rounds: AttemptResultRow[][] = [];
  const seen = new Map<string, number>();
  for (const row of rows) {
    const key = `${row.runName}\u0000${row.cellId}`;
    const k = seen.get(key) ?? 0;
    seen.set(key, k + 1);
    const round = rounds[k] ?? [];
    rounds[k] = round;
    round.push(row);
  }
  const tail = `ON CONFLICT (run_name, cell_id) DO UPDATE SET\n  ${ATTEMPT_SET}\n WHERE EXCLUDED.attempt >= r.attempt`;
  const write = async (tx: Db) => {
    let n = 0;
    for (const round of rounds)
      n += await insertBatched(tx, "run_results AS r", ATTEMPT_COLUMNS, round, tail);
    return n;
  };
  // A single round manages its own batching (and transaction when it needs several statements).
  return rounds.length === 1 ? write(db) : db.transaction(write);
}

/** Reads one cell's row back in code shape (money as nano-USD). */
export async function getAttemptResult(
  db: Db,
  runName: string,
  cellId: string,
): Promise<AttemptResultRow | null> {
  const r = await db.query("SELECT * FROM run_results WHERE run_name = $1 AND cell_id = $2", [
    runName,
    cellId,
  ]);
  const row = r.rows[0];
  if (!row) return null;
  const out: Record<string, unknown> = {};
  for (const col of ATTEMPT_COLUMNS) {
    const v = row[col.column];
    out[col.field] = col.kind === "usd" ? usdToNanoNumber(v as string | null) : v;
  }
  return out as unknown as AttemptResultRow;
}

// ---- phase_results ------------------------------------------------------------------------------------------

export interface PhaseResultRow {
  runName: string;
  cellId: string;
  attempt: number;
  phaseName: string;
  traceId?: string | null;
  model?: string | null;
  modelRole?: string | null;
  exitCode?: number | null;
  durationMs?: number | null;
  timedOut?: boolean | number | null;
  inputTokens?: number | null;
  outputTokens?: number | null;
  totalCostNanoUsd?: number | bigint | null;
  numApiCalls?: number | null;
  error?: string | null;
  stdout?: string | null;
  stderr?: string | null;
  timestamp?: string | null;
}

const PHASE_COLUMNS: readonly Col<PhaseResultRow>[] = [
  c("runName", "run_name", "text"),
  c("cellId", "cell_id", "text"),
  c("attempt", "attempt", "int"),
  c("phaseName", "phase_name", "text"),
  c("traceId", "trace_id", "text"),
  c("model", "model", "text"),
  c("modelRole", "model_role", "text"),
  c("exitCode", "exit_code", "int"),
  c("durationMs", "duration_ms", "float"),
  c("timedOut", "timed_out", "int"),
  c("inputTokens", "input_tokens", "bigint"),
  c("outputTokens", "output_tokens", "bigint"),
  c("totalCostNanoUsd", "total_cost", "usd"),
  c("numApiCalls", "num_api_calls", "int"),
  c("error", "error", "text"),
  c("stdout", "stdout", "text"),
  c("stderr", "stderr", "text"),
  c("timestamp", "timestamp", "text"),
];

/**
 * Phase rows for attempts already in run_results (the foreign key requires the parent). A phase of an attempt
 * is a fact: a redelivered one is dropped by the (run, cell, attempt, phase) unique index. Returns how many were new.
 */
export async function insertPhaseResults(db: Db, rows: readonly PhaseResultRow[]): Promise<number> {
  const norm = rows.map((r) => ({
    ...r,
    timedOut: typeof r.timedOut === "boolean" ? Number(r.timedOut) : r.timedOut,
  }));
  return insertBatched(
    db,
    "phase_results",
    PHASE_COLUMNS,
    norm,
    "ON CONFLICT (run_name, cell_id, attempt, phase_name) DO NOTHING",
  );
}

// ---- costs --------------------------------------------------------------------------------------------------

/**
 * The budget-relevant spend of a run, in nano-USD: total_cost over rows whose cost_mode is not 'subscription'.
 * A NULL (or unknown) cost_mode is billable — over-charging is safe, under-charging is not.
 */
export async function getBillableCost(db: Db, runName: string): Promise<number> {
  return sumUsd(
    db,
    "SELECT COALESCE(sum(total_cost), 0)::text AS usd FROM run_results WHERE run_name = $1 AND cost_mode IS DISTINCT FROM 'subscription'",
    runName,
  );
}

/** Every cell's total_cost, exempt or not (the informational total), in nano-USD. */
export async function getTotalCost(db: Db, runName: string): Promise<number> {
  return sumUsd(
    db,
    "SELECT COALESCE(sum(total_cost), 0)::text AS usd FROM run_results WHERE run_name = $1",
    runName,
  );
}

async function sumUsd(db: Db, sql: string, runName: string): Promise<number> {
  const r = await db.query<{ usd: string }>(sql, [runName]);
  return nanoToNumber(usdToNano(r.rows[0]?.usd ?? "0"));
}
