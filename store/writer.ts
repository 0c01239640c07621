import { nanoToNumber } from "../protocol/money.js";
import { type Col, insertBatched } from "./batch.js";
import type { Db } from "./db.js";
import { voidLedgerForTrace } from "./ledger.js";
import type { CellStatus } from "./results.js";

/*
 * Set-based queries the results-writer needs on top of results.ts / ledger.ts: each takes a batch of cells and
 * costs one statement, so a 500-message batch is a handful of round trips rather than hundreds.
 */

export interface CellKey {
  runName: string;
  cellId: string;
}

/** `(VALUES ($1::text,$2::text), …)`: the batch's distinct cells as a relation, parameters from `offset`. */
function cellValues(keys: readonly CellKey[], offset = 0): { sql: string; params: string[] } {
  const params: string[] = [];
  const tuples = keys.map((k) => {
    params.push(k.runName, k.cellId);
    return `($${offset + params.length - 1}::text,$${offset + params.length}::text)`;
  });
  return { sql: `(VALUES ${tuples.join(",")})`, params };
}

/** Distinct cells, in a stable order (lock order). */
export function distinctCells(keys: readonly CellKey[]): CellKey[] {
  const seen = new Map<string, CellKey>();
  for (const k of keys) seen.set(`${k.runName}\u0000${k.cellId}`, { runName: k.runName, cellId: k.cellId });
  return [...seen.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, v]) => v);
}

// Two-int advisory locks live in a key space apart from the migrator's single bigint key.
const LOCK_NAMESPACE = 0x45465257; // "EFRW"

/**
 * Serialises transactions that touch the same cell (an attempt result and its ledger rows arrive on different
 * streams, possibly in two replicas at once): under READ COMMITTED the second transaction then sees the first's
 * rows, so totals recomputed from the ledger never miss a concurrent write. Locks are taken in hash order, so two
 * batches cannot deadlock on them. PGlite is one session whose transactions are already serialised.
 */
export async function lockCells(tx: Db, keys: readonly CellKey[]): Promise<void> {
  if (tx.kind === "pglite" || keys.length === 0) return;
  const v = cellValues(distinctCells(keys));
  await tx.query(
    `SELECT count(pg_advisory_xact_lock(${LOCK_NAMESPACE}, h)) FROM (
       SELECT DISTINCT hashtext(run_name || '/' || cell_id) AS h FROM ${v.sql} AS v(run_name, cell_id) ORDER BY h
     ) s`,
    v.params,
  );
}

/** What is already stored for a cell: which attempt, and whether its scoring is still awaited. */
export interface CellHead {
  attempt: number;
  gradeStatus: string | null;
}

export async function readHeads(db: Db, keys: readonly CellKey[]): Promise<Map<string, CellHead>> {
  const out = new Map<string, CellHead>();
  if (keys.length === 0) return out;
  const v = cellValues(distinctCells(keys));
  const r = await db.query<{
    run_name: string;
    cell_id: string;
    attempt: number;
    grade_status: string | null;
  }>(
    `SELECT r.run_name, r.cell_id, r.attempt, r.grade_status FROM run_results r
       JOIN ${v.sql} AS v(run_name, cell_id) ON r.run_name = v.run_name AND r.cell_id = v.cell_id`,
    v.params,
  );
  for (const row of r.rows)
    out.set(headKey(row.run_name, row.cell_id), { attempt: row.attempt, gradeStatus: row.grade_status });
  return out;
}

export function headKey(runName: string, cellId: string): string {
  return `${runName}\u0000${cellId}`;
}

/**
 * A re-run attempt starts clean: for each cell, ledger rows of attempts before its current one (the highest
 * attempt seen in the ledger or in run_results) are voided. One query finds the cells that have such rows — after
 * the first attempt that is none — and voidLedgerForTrace voids each. This also catches a late row of an old
 * attempt that lands after its successor started. Returns how many rows were voided.
 */
export async function voidSuperseded(tx: Db, keys: readonly CellKey[]): Promise<number> {
  if (keys.length === 0) return 0;
  const v = cellValues(distinctCells(keys));
  const stale = await tx.query<{ run_name: string; cell_id: string; current: number }>(
    `WITH v(run_name, cell_id) AS ${v.sql},
     cur AS (
       SELECT v.run_name, v.cell_id,
              GREATEST((SELECT max(l.attempt) FROM ledger_calls l
                         WHERE l.run_name = v.run_name AND l.cell_id = v.cell_id),
                       (SELECT r.attempt FROM run_results r
                         WHERE r.run_name = v.run_name AND r.cell_id = v.cell_id)) AS current
         FROM v)
     SELECT run_name, cell_id, current FROM cur
      WHERE current > 0 AND EXISTS (SELECT 1 FROM ledger_calls l WHERE l.run_name = cur.run_name
              AND l.cell_id = cur.cell_id AND l.attempt < cur.current AND NOT l.voided)`,
    v.params,
  );
  let voided = 0;
  for (const s of stale.rows)
    voided += await voidLedgerForTrace(tx, s.run_name, { cellId: s.cell_id }, s.current);
  return voided;
}

/** An attempt row's money and tokens, as recomputed from the ledger. */
export interface AttemptTotals extends CellKey {
  attempt: number;
  status: string | null;
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  reasoningTokens: number;
  calls: number;
  totalCostNanoUsd: number;
}

/**
 * Recomputes the attempt rows of these cells from the ledger (the truth about money): tokens, calls and
 * total_cost are sums over the cell's non-voided calls, whatever the harness claimed. billable_cost is the cell's
 * budget-relevant spend: every call ever made for it, voided retries included (that money was spent), or 0 when
 * the cell is budget-exempt (cost_mode 'subscription'; NULL is billable). Cells with no row yet are skipped —
 * the row's own landing runs this again.
 */
export async function refreshAttemptTotals(tx: Db, keys: readonly CellKey[]): Promise<AttemptTotals[]> {
  if (keys.length === 0) return [];
  const v = cellValues(distinctCells(keys));
  const r = await tx.query<{
    run_name: string;
    cell_id: string;
    attempt: number;
    status: string | null;
    i: number;
    o: number;
    cr: number;
    cw: number;
    rs: number;
    n: number;
    live: string;
  }>(
    // Only cells that have a row are summed (calls usually land before their result), each with one LATERAL
    // index probe: a plain join lets the planner hash the whole ledger table per batch.
    `WITH v(run_name, cell_id) AS ${v.sql},
     s AS (
       SELECT v.run_name, v.cell_id, x.* FROM v
         JOIN run_results r0 ON r0.run_name = v.run_name AND r0.cell_id = v.cell_id
        CROSS JOIN LATERAL (
         SELECT sum(l.input_tokens) FILTER (WHERE NOT l.voided) AS i,
                sum(l.output_tokens) FILTER (WHERE NOT l.voided) AS o,
                sum(l.cache_read_tokens) FILTER (WHERE NOT l.voided) AS cr,
                sum(l.cache_write_tokens) FILTER (WHERE NOT l.voided) AS cw,
                sum(l.reasoning_tokens) FILTER (WHERE NOT l.voided) AS rs,
                count(*) FILTER (WHERE NOT l.voided) AS n,
                sum(l.cost_nano_usd) FILTER (WHERE NOT l.voided) AS live,
                sum(l.cost_nano_usd) AS spent
           FROM ledger_calls l WHERE l.run_name = v.run_name AND l.cell_id = v.cell_id) x)
     UPDATE run_results r SET
       input_tokens = COALESCE(s.i, 0), output_tokens = COALESCE(s.o, 0),
       cache_read_tokens = COALESCE(s.cr, 0), cache_write_tokens = COALESCE(s.cw, 0),
       reasoning_tokens = COALESCE(s.rs, 0), num_api_calls = COALESCE(s.n, 0),
       total_cost = COALESCE(s.live, 0) / 1000000000::numeric,
       billable_cost = CASE WHEN r.cost_mode = 'subscription' THEN 0
                            ELSE COALESCE(s.spent, 0) / 1000000000::numeric END
       FROM s
      WHERE r.run_name = s.run_name AND r.cell_id = s.cell_id
     RETURNING r.run_name, r.cell_id, r.attempt, r.status, r.input_tokens AS i, r.output_tokens AS o,
       r.cache_read_tokens AS cr, r.cache_write_tokens AS cw, r.reasoning_tokens AS rs, r.num_api_calls AS n,
       COALESCE(s.live, 0)::text AS live`,
    v.params,
  );
  return r.rows.map((x) => ({
    runName: x.run_name,
    cellId: x.cell_id,
    attempt: x.attempt,
    status: x.status,
    inputTokens: Number(x.i),
    outputTokens: Number(x.o),
    cacheReadTokens: Number(x.cr),
    cacheWriteTokens: Number(x.cw),
    reasoningTokens: Number(x.rs),
    calls: Number(x.n),
    totalCostNanoUsd: nanoToNumber(BigInt(x.live)),
  }));
}

/** Phase rows of these cells' current attempts, recomputed from their traces' non-voided ledger calls. */
export async function refreshPhaseTotals(tx: Db, keys: readonly CellKey[]): Promise<number> {
  if (keys.length === 0) return 0;
  const v = cellValues(distinctCells(keys));
  const r = await tx.query(
    `WITH v(run_name, cell_id) AS ${v.sql},
     s AS (
       SELECT v.run_name, v.cell_id, x.* FROM v CROSS JOIN LATERAL (
         SELECT l.attempt, l.trace_id, sum(l.input_tokens) AS i, sum(l.output_tokens) AS o, count(*) AS n,
                sum(l.cost_nano_usd) AS cost
           FROM ledger_calls l WHERE l.run_name = v.run_name AND l.cell_id = v.cell_id AND NOT l.voided
          GROUP BY l.attempt, l.trace_id) x)
     UPDATE phase_results p SET input_tokens = s.i, output_tokens = s.o, num_api_calls = s.n,
       total_cost = s.cost / 1000000000::numeric
       FROM s
      WHERE p.run_name = s.run_name AND p.cell_id = s.cell_id AND p.attempt = s.attempt
        AND p.trace_id = s.trace_id`,
    v.params,
  );
  return r.rowCount;
}

export interface CellStatusRow extends CellKey {
  status: CellStatus;
  error: string | null;
  at: string;
}

const STATUS_COLUMNS: readonly Col<
  CellStatusRow & { startedAt: string | null; completedAt: string | null }
>[] = [
  { field: "runName", column: "run_name", kind: "text" },
  { field: "cellId", column: "cell_id", kind: "text" },
  { field: "status", column: "status", kind: "text" },
  { field: "startedAt", column: "started_at", kind: "text" },
  { field: "completedAt", column: "completed_at", kind: "text" },
  { field: "error", column: "error", kind: "text" },
];

/**
 * setCellStatus for a batch (one row per cell): the same rule — a `completed` cell is never demoted — but a
 * `running` row keeps the started_at the dispatcher stamped when it launched the attempt.
 */
export async function setCellStatuses(tx: Db, rows: readonly CellStatusRow[]): Promise<number> {
  const norm = rows.map((r) => ({
    ...r,
    startedAt: r.status === "running" ? r.at : null,
    completedAt: r.status === "completed" || r.status === "failed" || r.status === "skipped" ? r.at : null,
  }));
  return insertBatched(
    tx,
    "run_state AS s",
    STATUS_COLUMNS,
    norm,
    `ON CONFLICT (run_name, cell_id) DO UPDATE SET status = EXCLUDED.status,
       started_at = COALESCE(s.started_at, EXCLUDED.started_at),
       completed_at = CASE WHEN EXCLUDED.status IN ('pending', 'running') THEN NULL ELSE EXCLUDED.completed_at END,
       error = EXCLUDED.error
     WHERE s.status IS DISTINCT FROM 'completed' OR EXCLUDED.status = 'completed'`,
  );
}

/** A grade landing on its attempt's row. */
export interface GradeUpdate extends CellKey {
  attempt: number;
  gradeStatus: string;
  resolved: boolean | null;
  report: unknown;
  /** ISO time (callers normalise it: a bad string would fail the cast). */
  gradedAt: string;
  exitClass: string | null;
  success: number | null;
  errorClass: string;
  error: string | null;
}

/**
 * Lands grades on the row of the attempt they graded (a grade of a superseded attempt changes nothing). An
 * INFRA_FAILURE never replaces a real grade of the same attempt; a real grade replaces an INFRA_FAILURE.
 * Returns the rows changed.
 */
export async function applyGrades(tx: Db, grades: readonly GradeUpdate[]): Promise<CellKey[]> {
  if (grades.length === 0) return [];
  const params: unknown[] = [];
  const p = (x: unknown, cast: string) => {
    params.push(x);
    return `$${params.length}::${cast}`;
  };
  const tuples = grades.map(
    (g) =>
      `(${[
        p(g.runName, "text"),
        p(g.cellId, "text"),
        p(g.attempt, "integer"),
        p(g.gradeStatus, "text"),
        p(g.resolved, "boolean"),
        p(JSON.stringify(g.report), "jsonb"),
        p(g.gradedAt, "timestamptz"),
        p(g.exitClass, "text"),
        p(g.success, "double precision"),
        p(g.errorClass, "text"),
        p(g.error, "text"),
      ].join(",")})`,
  );
  const r = await tx.query<{ run_name: string; cell_id: string }>(
    `UPDATE run_results r SET grade_status = v.gs, resolved = v.resolved, grade_report = v.report,
       graded_at = v.at,
       exit_class = v.exit_class, success = v.success, error_class = v.error_class,
       error_message = COALESCE(r.error_message, v.err)
       FROM (VALUES ${tuples.join(",")}) AS v(run_name, cell_id, attempt, gs, resolved, report, at, exit_class,
                                              success, error_class, err)
      WHERE r.run_name = v.run_name AND r.cell_id = v.cell_id AND r.attempt = v.attempt
        AND NOT (v.gs = 'INFRA_FAILURE' AND r.grade_status IN ('FULL', 'PARTIAL', 'NO'))
     RETURNING r.run_name, r.cell_id`,
    params,
  );
  return r.rows.map((x) => ({ runName: x.run_name, cellId: x.cell_id }));
}

export interface VerdictUpdate extends CellKey {
  attempt: number;
  score: number;
  verdict: unknown;
}

/**
 * Lands judge verdicts on their attempt's row. An open-ended attempt is never graded, so its score is also its
 * success; grade_status moves from PENDING to JUDGED.
 */
export async function applyVerdicts(tx: Db, verdicts: readonly VerdictUpdate[]): Promise<CellKey[]> {
  if (verdicts.length === 0) return [];
  const params: unknown[] = [];
  const tuples = verdicts.map((x) => {
    params.push(x.runName, x.cellId, x.attempt, x.score, JSON.stringify(x.verdict));
    const n = params.length;
    return `($${n - 4}::text,$${n - 3}::text,$${n - 2}::integer,$${n - 1}::double precision,$${n}::jsonb)`;
  });
  const r = await tx.query<{ run_name: string; cell_id: string }>(
    `UPDATE run_results r SET verdict_score = v.score, verdict = v.verdict,
       success = CASE WHEN r.grade_status IN ('FULL', 'PARTIAL', 'NO') THEN r.success ELSE v.score END,
       grade_status = CASE WHEN r.grade_status = 'PENDING' THEN 'JUDGED' ELSE r.grade_status END
       FROM (VALUES ${tuples.join(",")}) AS v(run_name, cell_id, attempt, score, verdict)
      WHERE r.run_name = v.run_name AND r.cell_id = v.cell_id AND r.attempt = v.attempt
     RETURNING r.run_name, r.cell_id`,
    params,
  );
  return r.rows.map((x) => ({ runName: x.run_name, cellId: x.cell_id }));
}

/** What the live progress key shows about a run's money and outstanding scoring. */
export interface RunSpend {
  /** Every ledger call of the run, voided ones included: money actually spent. */
  totalNanoUsd: number;
  /** The same over cells that are not budget-exempt (a cell with no row yet counts as billable). */
  billableNanoUsd: number;
  /** Attempts whose grade or verdict is still awaited (grade_status PENDING). */
  awaitingScore: number;
  /**
   * The part of the total that is an estimate, and its calls: calls whose answer reached nobody, at their worst case
   * until trued up to the provider's usage report, or their share of it (`apportioned`).
   */
  estimatedNanoUsd?: number;
  estimatedCalls?: number;
}

export async function getRunSpend(db: Db, runName: string): Promise<RunSpend> {
  // Billable = everything minus the exempt cells' calls: exempt cells are few (often none), so the join stays small.
  const money = await db.query<{
    total: string;
    exempt: string;
    pending: number;
    estimated: string;
    estimated_calls: number;
  }>(
    `SELECT (SELECT COALESCE(sum(cost_nano_usd), 0) FROM ledger_calls WHERE run_name = $1)::text AS total,
            (SELECT COALESCE(sum(l.cost_nano_usd), 0) FROM run_results r
               JOIN ledger_calls l ON l.run_name = r.run_name AND l.cell_id = r.cell_id
              WHERE r.run_name = $1 AND r.cost_mode = 'subscription')::text AS exempt,
            (SELECT count(*) FROM run_results WHERE run_name = $1 AND grade_status = 'PENDING') AS pending,
            (SELECT COALESCE(sum(cost_nano_usd), 0) FROM ledger_calls WHERE run_name = $1 AND estimated)::text
              AS estimated,
            (SELECT count(*) FROM ledger_calls WHERE run_name = $1 AND estimated)::int AS estimated_calls`,
    [runName],
  );
  const m = money.rows[0];
  const total = BigInt(m?.total ?? "0");
  return {
    totalNanoUsd: nanoToNumber(total),
    billableNanoUsd: nanoToNumber(total - BigInt(m?.exempt ?? "0")),
    awaitingScore: Number(m?.pending ?? 0),
    estimatedNanoUsd: nanoToNumber(BigInt(m?.estimated ?? "0")),
    estimatedCalls: Number(m?.estimated_calls ?? 0),
  };
}
