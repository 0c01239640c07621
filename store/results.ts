import { nanoToNumber, usdToNano, usdToNanoNumber } from "../protocol/money.js";
import { GRADE_INFRA_ERROR_CLASS, INFRA_ERROR_CLASS } from "../protocol/retry.js";
import { type Col, chunkRows, col, insertBatched } from "./batch.js";
import type { Db } from "./db.js";
import { quote } from "./migrations/types.js";

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

/** Every stored run config (run_metadata.config_json), newest first. */
export async function listRunConfigJson(db: Db): Promise<string[]> {
  const r = await db.query<{ config_json: string }>(
    "SELECT config_json FROM run_metadata ORDER BY created_at DESC",
  );
  return r.rows.map((x) => x.config_json);
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

/** Cells of the run not yet final whose ids begin with one of the prefixes (a pool's: matrix.poolCellPrefixes). */
export async function countOpenCellsOfPool(
  db: Db,
  run: string,
  cellPrefixes: readonly string[],
): Promise<number> {
  let n = 0;
  for (const prefix of cellPrefixes) {
    const r = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM run_state
        WHERE run_name = $1 AND left(cell_id, length($2)) = $2 AND status IN ('pending', 'running')`,
      [run, prefix],
    );
    n += Number(r.rows[0]?.n ?? 0);
  }
  return n;
}

/** How many cells the run has (run_state rows, any status). */
export async function countCells(db: Db, runName: string): Promise<number> {
  const r = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM run_state WHERE run_name = $1", [
    runName,
  ]);
  return Number(r.rows[0]?.n ?? 0);
}

/** Every cell id of the run, in cell-id order. */
export async function listCellIds(db: Db, runName: string): Promise<string[]> {
  const r = await db.query<{ cell_id: string }>(
    "SELECT cell_id FROM run_state WHERE run_name = $1 ORDER BY cell_id",
    [runName],
  );
  return r.rows.map((x) => x.cell_id);
}

export async function getCellStatuses(db: Db, runName: string): Promise<Record<CellStatus | string, number>> {
  const r = await db.query<{ status: string; n: number }>(
    "SELECT status, count(*) AS n FROM run_state WHERE run_name = $1 GROUP BY status",
    [runName],
  );
  return Object.fromEntries(r.rows.map((x) => [x.status, x.n]));
}

/**
 * The seed's progress counters from the cells' final rows: `pass` cells (exit_class pass), `notPass` cells (fail,
 * retryable_kill, non_retryable_kill, or failed without a row), `skipped` (budget cap), `awaitingScore` (done but
 * not graded or judged yet), and the first error messages of failed and skipped cells (`cell: error`).
 */
export interface SeedCounts {
  pass: number;
  notPass: number;
  skipped: number;
  awaitingScore: number;
  errors: string[];
}

export async function getSeedCounts(db: Db, runName: string, maxErrors = 20): Promise<SeedCounts> {
  const counts = await db.query<{ pass: string; not_pass: string; skipped: string; awaiting: string }>(
    `SELECT count(*) FILTER (WHERE s.status IN ('completed', 'failed') AND r.grade_status IS DISTINCT FROM 'PENDING'
                               AND r.exit_class = 'pass')::text AS pass,
            count(*) FILTER (WHERE s.status IN ('completed', 'failed') AND r.grade_status IS DISTINCT FROM 'PENDING'
                               AND r.exit_class IS DISTINCT FROM 'pass')::text AS not_pass,
            count(*) FILTER (WHERE s.status = 'skipped')::text AS skipped,
            count(*) FILTER (WHERE s.status IN ('completed', 'failed') AND r.grade_status = 'PENDING')::text AS awaiting
       FROM run_state s LEFT JOIN run_results r ON r.run_name = s.run_name AND r.cell_id = s.cell_id
      WHERE s.run_name = $1`,
    [runName],
  );
  const errors = await db.query<{ cell_id: string; error: string }>(
    `SELECT cell_id, error FROM run_state
      WHERE run_name = $1 AND error IS NOT NULL AND error <> '' AND status IN ('failed', 'skipped')
      ORDER BY completed_at NULLS LAST, cell_id LIMIT $2`,
    [runName, maxErrors],
  );
  const c = counts.rows[0];
  return {
    pass: Number(c?.pass ?? 0),
    notPass: Number(c?.not_pass ?? 0),
    skipped: Number(c?.skipped ?? 0),
    awaitingScore: Number(c?.awaiting ?? 0),
    errors: errors.rows.map((e) => `${e.cell_id}: ${e.error}`),
  };
}

/**
 * Cells whose row is an infrastructure failure (the attempt's or its grade's): counted apart from the model's
 * outcomes by the progress key, watch, the dashboard and the report.
 */
export async function countInfraFailures(db: Db, runName: string): Promise<number> {
  const r = await db.query<{ n: string }>(
    `SELECT count(*)::text AS n FROM run_results
      WHERE run_name = $1 AND (error_class = ANY($2::text[]) OR grade_status = 'INFRA_FAILURE')`,
    [runName, [INFRA_ERROR_CLASS, GRADE_INFRA_ERROR_CLASS]],
  );
  return Number(r.rows[0]?.n ?? 0);
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

export const ATTEMPT_COLUMNS: readonly Col<AR>[] = [
  col("runName", "run_name", "text"),
  col("cellId", "cell_id", "text"),
  col("attempt", "attempt", "int"),
  col("harness", "harness", "text"),
  col("model", "model", "text"),
  col("taskId", "task_id", "text"),
  col("track", "track", "text"),
  col("repeat", "repeat", "int"),
  col("exitClass", "exit_class", "text"),
  col("success", "success", "float"),
  col("errorClass", "error_class", "text"),
  col("errorMessage", "error_message", "text"),
  col("inputTokens", "input_tokens", "bigint"),
  col("outputTokens", "output_tokens", "bigint"),
  col("cacheReadTokens", "cache_read_tokens", "bigint"),
  col("cacheWriteTokens", "cache_write_tokens", "bigint"),
  col("reasoningTokens", "reasoning_tokens", "bigint"),
  col("totalCostNanoUsd", "total_cost", "usd"),
  col("latencyMs", "latency_ms", "float"),
  col("timeToFirstAttemptMs", "time_to_first_attempt_ms", "float"),
  col("numApiCalls", "num_api_calls", "int"),
  col("numToolCalls", "num_tool_calls", "int"),
  col("diff", "diff", "text"),
  col("testOutput", "test_output", "text"),
  col("harnessMetadata", "harness_metadata", "jsontext"),
  col("harnessStdout", "harness_stdout", "text"),
  col("harnessStderr", "harness_stderr", "text"),
  col("timestamp", "timestamp", "text"),
  col("retryCount", "retry_count", "int"),
  col("costMode", "cost_mode", "text"),
  col("status", "status", "text"),
  col("traceId", "trace_id", "text"),
  col("reviewModel", "review_model", "text"),
  col("billableCostNanoUsd", "billable_cost", "usd"),
  col("patchHash", "patch_hash", "text"),
  col("patchRef", "patch_ref", "text"),
  col("trajectoryRef", "trajectory_ref", "text"),
  col("gradeStatus", "grade_status", "text"),
  col("resolved", "resolved", "bool"),
  col("gradeReport", "grade_report", "json"),
  col("gradedAt", "graded_at", "ts"),
  col("verdictScore", "verdict_score", "float"),
  col("verdict", "verdict", "json"),
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

/** Whether this attempt of the cell has its verdict in run_results already. */
export async function hasVerdict(db: Db, runName: string, cellId: string, attempt: number): Promise<boolean> {
  const r = await db.query(
    "SELECT 1 FROM run_results WHERE run_name = $1 AND cell_id = $2 AND attempt = $3 AND verdict IS NOT NULL",
    [runName, cellId, attempt],
  );
  return r.rowCount > 0;
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
  col("runName", "run_name", "text"),
  col("cellId", "cell_id", "text"),
  col("attempt", "attempt", "int"),
  col("phaseName", "phase_name", "text"),
  col("traceId", "trace_id", "text"),
  col("model", "model", "text"),
  col("modelRole", "model_role", "text"),
  col("exitCode", "exit_code", "int"),
  col("durationMs", "duration_ms", "float"),
  col("timedOut", "timed_out", "int"),
  col("inputTokens", "input_tokens", "bigint"),
  col("outputTokens", "output_tokens", "bigint"),
  col("totalCostNanoUsd", "total_cost", "usd"),
  col("numApiCalls", "num_api_calls", "int"),
  col("error", "error", "text"),
  col("stdout", "stdout", "text"),
  col("stderr", "stderr", "text"),
  col("timestamp", "timestamp", "text"),
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

/** What pruning a run's NATS state waits for: no cell still open, no score awaited, and when the last cell ended. */
export interface RunActivity {
  /** cells pending or running */
  open: number;
  /** attempts whose grade or verdict is still awaited */
  awaitingScore: number;
  /** the latest completed_at of the run's cells (ISO), null when none ended */
  lastCompletedAt: string | null;
}

export async function getRunActivity(db: Db, runName: string): Promise<RunActivity> {
  const r = await db.query<{ open: number; awaiting: number; last: string | null }>(
    `SELECT (SELECT count(*) FROM run_state WHERE run_name = $1 AND status IN ('pending', 'running'))::int AS open,
            (SELECT count(*) FROM run_results WHERE run_name = $1 AND grade_status = 'PENDING')::int AS awaiting,
            (SELECT max(completed_at) FROM run_state WHERE run_name = $1) AS last`,
    [runName],
  );
  const row = r.rows[0];
  return {
    open: Number(row?.open ?? 0),
    awaitingScore: Number(row?.awaiting ?? 0),
    lastCompletedAt: row?.last ?? null,
  };
}

/**
 * Per cell, the highest attempt number the database knows (its result row or any ledger call). A resumed run's
 * cells start after it, so a cell whose NATS state was pruned never reuses an old attempt's number.
 */
export async function latestKnownAttempts(db: Db, runName: string): Promise<Map<string, number>> {
  const r = await db.query<{ cell_id: string; n: number }>(
    `SELECT cell_id, max(n)::int AS n FROM (
       SELECT cell_id, attempt AS n FROM run_results WHERE run_name = $1
       UNION ALL SELECT cell_id, max(attempt) FROM ledger_calls WHERE run_name = $1 GROUP BY cell_id) a
     GROUP BY cell_id`,
    [runName],
  );
  return new Map(r.rows.map((row) => [row.cell_id, Number(row.n)]));
}
