import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import { nanoToNumber, usdToNano } from "../protocol/money.js";
import type { Db } from "./db.js";

/*
 * The report's reads. Money is summed in SQL (NUMERIC, exact) and converted to nano-USD without a float. A ledger
 * row's cell decides its group and its billability (the run_results row's cost_mode: all-or-nothing per cell,
 * NULL or no row is billable — the same rule as the live progress key).
 */

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

/** One cell's identity and patch location, what a predictions.jsonl line is made from. */
export interface PredictionSource {
  cellId: string;
  harness: string;
  model: string;
  taskId: string;
  repeat: number | null;
  patchRef: string | null;
  diff: string | null;
}

/** A ledger call whose cell has no run_results row, and whose cell id names no harness × model of its run. */
export const NO_ATTEMPT_ROW = "(no attempt row)";

const nano = (v: string | null | undefined): number => nanoToNumber(BigInt(v ?? "0"));
const usdNano = (v: string | null | undefined): number => nanoToNumber(usdToNano(v ?? "0"));
const num = (v: unknown): number => (v === null || v === undefined ? 0 : Number(v));

/** Runs the database knows, newest first (for "unknown run" messages). */
export async function knownRuns(db: Db, limit = 20): Promise<string[]> {
  const r = await db.query<{ run_name: string }>(
    `SELECT run_name FROM (
       SELECT run_name, created_at AS at FROM run_metadata
       UNION ALL SELECT DISTINCT run_name, NULL FROM run_results) x
      GROUP BY run_name ORDER BY max(at) DESC NULLS LAST, run_name LIMIT $1`,
    [limit],
  );
  return r.rows.map((x) => x.run_name);
}

/** Fails with a message that lists known runs when the database has nothing of `run`. */
export async function assertRunExists(db: Db, run: string, where: string): Promise<void> {
  const r = await db.query<{ found: boolean }>(
    `SELECT EXISTS (SELECT 1 FROM run_metadata WHERE run_name = $1)
         OR EXISTS (SELECT 1 FROM run_results WHERE run_name = $1)
         OR EXISTS (SELECT 1 FROM ledger_calls WHERE run_name = $1) AS found`,
    [run],
  );
  if (r.rows[0]?.found) return;
  const runs = await knownRuns(db);
  throw new EvalfleetError(
    ErrorCode.NotFound,
    `run "${run}" is not in ${where}. ${
      runs.length > 0 ? `Runs there: ${runs.join(", ")}.` : "It has no runs yet."
    } List live runs with: evalfleet status`,
  );
}

/** The run_results columns that say which cell a row is, and what they read as (see cellOf). */
const CELL_COLUMNS = "cell_id, harness, model, task_id, repeat";
type CellIdentity = Pick<AttemptRow, "cellId" | "harness" | "model" | "taskId" | "repeat">;

/** A row's cell: a row the planner wrote before any attempt has no harness, model or task yet. */
function cellOf(x: Record<string, unknown>): CellIdentity {
  return {
    cellId: String(x.cell_id),
    harness: (x.harness as string | null) ?? NO_ATTEMPT_ROW,
    model: (x.model as string | null) ?? "?",
    taskId: (x.task_id as string | null) ?? String(x.cell_id),
    repeat: x.repeat === null ? null : Number(x.repeat),
  };
}

export async function loadAttempts(db: Db, run: string): Promise<AttemptRow[]> {
  const r = await db.query<Record<string, unknown>>(
    `SELECT ${CELL_COLUMNS}, attempt, status, grade_status, resolved, success, error_class, latency_ms
       FROM run_results WHERE run_name = $1 ORDER BY cell_id`,
    [run],
  );
  return r.rows.map((x) => ({
    ...cellOf(x),
    attempt: num(x.attempt),
    status: (x.status as string | null) ?? null,
    gradeStatus: (x.grade_status as string | null) ?? null,
    resolved: (x.resolved as boolean | null) ?? null,
    success: x.success === null || x.success === undefined ? null : Number(x.success),
    errorClass: (x.error_class as string | null) ?? null,
    latencyMs: x.latency_ms === null || x.latency_ms === undefined ? null : Number(x.latency_ms),
  }));
}

/*
 * A ledger call whose cell has no run_results row yet (its attempt is still running, or its result has not landed)
 * belongs to the harness × model its cell id starts with (`<harness>__<model>__…`, the run config's names:
 * run_metadata), so a running cell's spend is in its group rather than apart.
 */
const LEDGER_FROM = `FROM ledger_calls l LEFT JOIN run_results r ON r.run_name = l.run_name AND r.cell_id = l.cell_id
  LEFT JOIN LATERAL (
    SELECT h.value->>'name' AS harness, m.value->>'name' AS model
      FROM run_metadata md,
           jsonb_array_elements(CASE WHEN jsonb_typeof(md.config_json::jsonb->'harnesses') = 'array'
                                     THEN md.config_json::jsonb->'harnesses' ELSE '[]'::jsonb END) h,
           jsonb_array_elements(CASE WHEN jsonb_typeof(md.config_json::jsonb->'models') = 'array'
                                     THEN md.config_json::jsonb->'models' ELSE '[]'::jsonb END) m
     WHERE r.cell_id IS NULL AND md.run_name = l.run_name
       AND starts_with(l.cell_id, (h.value->>'name') || '__' || (m.value->>'name') || '__')
     LIMIT 1) n ON true
  WHERE l.run_name = $1`;
const BILLABLE = "r.cost_mode IS DISTINCT FROM 'subscription'";
const GROUP_HARNESS = `COALESCE(r.harness, n.harness, '${NO_ATTEMPT_ROW}')`;
const GROUP_MODEL = "COALESCE(r.model, n.model, l.model, '?')";

export async function loadLedgerGroups(db: Db, run: string): Promise<LedgerGroup[]> {
  const r = await db.query<Record<string, string | number | null>>(
    `SELECT ${GROUP_HARNESS} AS harness, ${GROUP_MODEL} AS model,
            count(*) AS calls, count(*) FILTER (WHERE l.voided) AS voided_calls,
            sum(l.cost_nano_usd)::text AS total,
            COALESCE(sum(l.cost_nano_usd) FILTER (WHERE ${BILLABLE}), 0)::text AS billable,
            COALESCE(sum(l.cost_nano_usd) FILTER (WHERE l.voided), 0)::text AS voided,
            sum(l.input_tokens)::text AS i, sum(l.output_tokens)::text AS o,
            sum(l.cache_read_tokens)::text AS cr, sum(l.cache_write_tokens)::text AS cw,
            sum(l.reasoning_tokens)::text AS rs, COALESCE(sum(l.pacer_wait_ms), 0)::text AS wait,
            percentile_cont(0.5) WITHIN GROUP (ORDER BY l.latency_ms) AS med
       ${LEDGER_FROM}
      GROUP BY 1, 2`,
    [run],
  );
  return r.rows.map((x) => ({
    harness: String(x.harness),
    model: String(x.model),
    calls: num(x.calls),
    voidedCalls: num(x.voided_calls),
    totalNanoUsd: nano(x.total as string),
    billableNanoUsd: nano(x.billable as string),
    voidedNanoUsd: nano(x.voided as string),
    tokens: {
      input: num(x.i),
      output: num(x.o),
      cacheRead: num(x.cr),
      cacheWrite: num(x.cw),
      reasoning: num(x.rs),
    },
    pacerWaitMs: num(x.wait),
    medianCallLatencyMs: x.med === null ? null : Number(x.med),
  }));
}

export async function loadPhaseGroups(db: Db, run: string): Promise<PhaseGroup[]> {
  const r = await db.query<Record<string, string | number | null>>(
    `SELECT COALESCE(r.harness, '${NO_ATTEMPT_ROW}') AS harness, COALESCE(r.model, '?') AS model,
            p.phase_name, p.model AS phase_model, count(*) AS n,
            COALESCE(sum(p.total_cost), 0)::text AS cost,
            COALESCE(sum(p.input_tokens), 0)::text AS i, COALESCE(sum(p.output_tokens), 0)::text AS o
       FROM phase_results p JOIN run_results r ON r.run_name = p.run_name AND r.cell_id = p.cell_id
      WHERE p.run_name = $1
      GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, min(p.id)`,
    [run],
  );
  return r.rows.map((x) => ({
    harness: String(x.harness),
    model: String(x.model),
    phase: String(x.phase_name),
    phaseModel: (x.phase_model as string | null) ?? null,
    rows: num(x.n),
    costNanoUsd: usdNano(x.cost as string),
    inputTokens: num(x.i),
    outputTokens: num(x.o),
  }));
}

/** Ledger spend in up to `buckets` equal time buckets between the run's first and last call. */
export async function loadSpendBuckets(db: Db, run: string, buckets = 120): Promise<SpendBucket[]> {
  const span = await db.query<{ lo: number | null; hi: number | null }>(
    `SELECT (extract(epoch FROM min(created_at)) * 1000)::float8 AS lo,
            (extract(epoch FROM max(created_at)) * 1000)::float8 AS hi
       FROM ledger_calls WHERE run_name = $1`,
    [run],
  );
  const lo = span.rows[0]?.lo;
  const hi = span.rows[0]?.hi;
  if (lo === null || lo === undefined || hi === null || hi === undefined) return [];
  const width = Math.max(1, Math.ceil((hi - lo + 1) / buckets));
  const r = await db.query<{ b: number; total: string; billable: string }>(
    `SELECT floor(((extract(epoch FROM l.created_at) * 1000)::float8 - $2) / $3)::int AS b,
            sum(l.cost_nano_usd)::text AS total,
            COALESCE(sum(l.cost_nano_usd) FILTER (WHERE ${BILLABLE}), 0)::text AS billable
       ${LEDGER_FROM}
      GROUP BY 1 ORDER BY 1`,
    [run, lo, width],
  );
  // A zero point at the first call, so the cumulative curve starts at $0 where the run's spending began.
  const start: SpendBucket = { atMs: lo, totalNanoUsd: 0, billableNanoUsd: 0 };
  return [
    start,
    ...r.rows.map((x) => ({
      atMs: Math.min(hi, lo + (Number(x.b) + 1) * width),
      totalNanoUsd: nano(x.total),
      billableNanoUsd: nano(x.billable),
    })),
  ];
}

/** Every cell's identity and patch location, for predictions.jsonl. */
export async function loadPredictionSources(db: Db, run: string): Promise<PredictionSource[]> {
  const r = await db.query<Record<string, unknown>>(
    `SELECT ${CELL_COLUMNS}, patch_ref, diff FROM run_results WHERE run_name = $1 ORDER BY cell_id`,
    [run],
  );
  return r.rows.map((x) => ({
    ...cellOf(x),
    patchRef: (x.patch_ref as string | null) ?? null,
    diff: (x.diff as string | null) ?? null,
  }));
}

/** Attempt rows per sandbox kind the task reported (harness_metadata.sandbox), `unknown` when it said none. */
export async function loadSandboxes(db: Db, run: string): Promise<Record<string, number>> {
  const r = await db.query<{ sandbox: string | null; n: string }>(
    `SELECT (harness_metadata::jsonb)->>'sandbox' AS sandbox, count(*)::text AS n
       FROM run_results WHERE run_name = $1 GROUP BY 1`,
    [run],
  );
  return Object.fromEntries(r.rows.map((x) => [x.sandbox ?? "unknown", Number(x.n)]));
}
