import { nanoToNumber } from "../protocol/money.js";
import { type Col, col, insertBatched } from "./batch.js";
import type { Db } from "./db.js";

/*
 * The per-call ledger: one row per provider call attempt, keyed by call_id, the truth about money. Rows are never
 * deleted; a re-run attempt voids its predecessors' rows so totals count each call once while the history stays.
 */

export interface LedgerCallRow {
  callId: string;
  runName: string;
  cellId: string;
  attempt: number;
  traceId?: string | null;
  model?: string | null;
  alias?: string | null;
  pool?: string | null;
  provider?: string | null;
  /** ok / error / cut / refused … */
  status: string;
  httpStatus?: number | null;
  inputTokens?: number;
  outputTokens?: number;
  cacheReadTokens?: number;
  cacheWriteTokens?: number;
  reasoningTokens?: number;
  costNanoUsd: number | bigint;
  priceVersion?: string | null;
  latencyMs?: number | null;
  ttfbMs?: number | null;
  pacerWaitMs?: number | null;
  retries?: number | null;
  clampedMaxTokens?: number | null;
  estimated?: boolean;
  costMode?: string | null;
  startedAt?: Date | string | null;
}

const LEDGER_COLUMNS: readonly Col<LedgerCallRow>[] = [
  col("callId", "call_id", "text"),
  col("runName", "run_name", "text"),
  col("cellId", "cell_id", "text"),
  col("attempt", "attempt", "int"),
  col("traceId", "trace_id", "text"),
  col("model", "model", "text"),
  col("alias", "alias", "text"),
  col("pool", "pool", "text"),
  col("provider", "provider", "text"),
  col("status", "status", "text"),
  col("httpStatus", "http_status", "int"),
  col("inputTokens", "input_tokens", "bigint"),
  col("outputTokens", "output_tokens", "bigint"),
  col("cacheReadTokens", "cache_read_tokens", "bigint"),
  col("cacheWriteTokens", "cache_write_tokens", "bigint"),
  col("reasoningTokens", "reasoning_tokens", "bigint"),
  col("costNanoUsd", "cost_nano_usd", "bigint"),
  col("priceVersion", "price_version", "text"),
  col("latencyMs", "latency_ms", "int"),
  col("ttfbMs", "ttfb_ms", "int"),
  col("pacerWaitMs", "pacer_wait_ms", "int"),
  col("retries", "retries", "int"),
  col("clampedMaxTokens", "clamped_max_tokens", "int"),
  col("estimated", "estimated", "bool"),
  col("costMode", "cost_mode", "text"),
  col("startedAt", "started_at", "ts"),
];

/** Batched insert; a call_id already present is skipped (redelivery). Returns how many rows were new. */
export async function insertLedgerCalls(db: Db, rows: readonly LedgerCallRow[]): Promise<number> {
  const norm = rows.map((r) => ({
    ...r,
    inputTokens: r.inputTokens ?? 0,
    outputTokens: r.outputTokens ?? 0,
    cacheReadTokens: r.cacheReadTokens ?? 0,
    cacheWriteTokens: r.cacheWriteTokens ?? 0,
    reasoningTokens: r.reasoningTokens ?? 0,
    estimated: r.estimated ?? false,
  }));
  return insertBatched(db, "ledger_calls", LEDGER_COLUMNS, norm, "ON CONFLICT (call_id) DO NOTHING");
}

/** Which calls to void: a cell's own rows, or a trace id and its descendants (`<traceId>__…`). */
export type LedgerTarget = { cellId: string } | { traceIdPrefix: string };

/**
 * Marks voided (never deletes) the run's ledger rows for a cell or trace written by attempts before
 * `beforeAttempt` — called when attempt N starts from scratch, so attempt N-1's calls stop counting.
 * A trace prefix matches the id itself or `prefix__…` only: a bare prefix would make `…__r1` swallow `…__r10`.
 * Returns how many rows were newly voided.
 */
export async function voidLedgerForTrace(
  db: Db,
  runName: string,
  target: LedgerTarget,
  beforeAttempt: number,
): Promise<number> {
  const base =
    "UPDATE ledger_calls SET voided = true, voided_at = now() WHERE run_name = $1 AND attempt < $2 AND NOT voided";
  if ("cellId" in target) {
    return (await db.query(`${base} AND cell_id = $3`, [runName, beforeAttempt, target.cellId])).rowCount;
  }
  const p = target.traceIdPrefix;
  const like = `${p.replace(/[\\%_]/g, (ch) => `\\${ch}`)}\\_\\_%`;
  const r = await db.query(`${base} AND (trace_id = $3 OR trace_id LIKE $4 ESCAPE '\\')`, [
    runName,
    beforeAttempt,
    p,
    like,
  ]);
  return r.rowCount;
}

export interface LedgerTotals {
  /** Sum over rows that still count (not voided): the run's spend. */
  nonVoidedNanoUsd: number;
  /** Sum over every row ever written, voided included. */
  allNanoUsd: number;
  calls: number;
  voidedCalls: number;
}

export async function ledgerTotals(db: Db, runName: string): Promise<LedgerTotals> {
  // sum(bigint) is NUMERIC: it comes back as an exact string and is converted without passing through a float.
  const r = await db.query<{ live: string; total: string; calls: number; voided: number }>(
    `SELECT COALESCE(sum(cost_nano_usd) FILTER (WHERE NOT voided), 0)::text AS live,
            COALESCE(sum(cost_nano_usd), 0)::text AS total,
            count(*) AS calls, count(*) FILTER (WHERE voided) AS voided
       FROM ledger_calls WHERE run_name = $1`,
    [runName],
  );
  const row = r.rows[0];
  return {
    nonVoidedNanoUsd: nanoToNumber(BigInt(row?.live ?? "0")),
    allNanoUsd: nanoToNumber(BigInt(row?.total ?? "0")),
    calls: row?.calls ?? 0,
    voidedCalls: row?.voided ?? 0,
  };
}

/** Billable ledger calls: cost mode (the row's own, else its cell's result row's) not `subscription`. */
const BILLABLE_CALL = `COALESCE(l.cost_mode, (SELECT r.cost_mode FROM run_results r
                                     WHERE r.run_name = l.run_name AND r.cell_id = l.cell_id))
                      IS DISTINCT FROM 'subscription'`;

/**
 * A run's billable spend now, per cell, for the live budget (dispatcher/budget.ts followLedger): the larger of the
 * ledger's billable calls (voided retries included: that money was spent) and what the gateway's spend log settled
 * for the cell's non-exempt keys, which covers calls whose ledger rows come in only when the run ends. Calls in
 * flight are left out: a worst-case reservation is not spend.
 */
export async function liveBillableByCell(db: Db, runName: string): Promise<Record<string, number>> {
  const r = await db.query<{ cell_id: string; n: string }>(
    `WITH l AS (SELECT l.cell_id, sum(l.cost_nano_usd) AS n FROM ledger_calls l
                 WHERE l.run_name = $1 AND ${BILLABLE_CALL} GROUP BY l.cell_id),
          g AS (SELECT cell_id, sum(cost_nano_usd) AS n FROM gateway_spend_log
                 WHERE run_name = $1 AND cell_id IS NOT NULL AND NOT exempt AND status IS DISTINCT FROM 'pending'
                 GROUP BY cell_id)
     SELECT COALESCE(l.cell_id, g.cell_id) AS cell_id, GREATEST(COALESCE(l.n, 0), COALESCE(g.n, 0))::text AS n
       FROM l FULL OUTER JOIN g ON g.cell_id = l.cell_id`,
    [runName],
  );
  const out: Record<string, number> = {};
  for (const row of r.rows) {
    const n = nanoToNumber(BigInt(row.n));
    if (n > 0) out[row.cell_id] = n;
  }
  return out;
}

/** One attempt's billable spend as the ledger and the gateway's settled log hold it now (the larger). */
export async function attemptBillableNanoUsd(
  db: Db,
  run: string,
  cellId: string,
  attempt: number,
): Promise<number> {
  const r = await db.query<{ ledger: string; gateway: string }>(
    `SELECT (SELECT COALESCE(sum(l.cost_nano_usd), 0) FROM ledger_calls l
              WHERE l.run_name = $1 AND l.cell_id = $2 AND l.attempt = $3 AND ${BILLABLE_CALL})::text AS ledger,
            (SELECT COALESCE(sum(cost_nano_usd), 0) FROM gateway_spend_log
              WHERE run_name = $1 AND cell_id = $2 AND attempt = $3 AND NOT exempt
                AND status IS DISTINCT FROM 'pending')::text AS gateway`,
    [run, cellId, attempt],
  );
  const ledger = BigInt(r.rows[0]?.ledger ?? "0");
  const gateway = BigInt(r.rows[0]?.gateway ?? "0");
  return nanoToNumber(ledger > gateway ? ledger : gateway);
}

// ---- fleet sizing's observations (planner/fleet.ts) --------------------------------------------------------

/** Ledger figures for one pool: means per call (tokens as the ledger counts them) and per attempt. */
export interface PoolObservations {
  calls: number;
  attempts: number;
  /** the pool's provider: decides whether cache reads count toward input tokens per minute */
  provider: string | null;
  inputTokensPerCall: number;
  cacheReadTokensPerCall: number;
  cacheWriteTokensPerCall: number;
  outputTokensPerCall: number;
  latencyP50Ms: number;
  latencyMeanMs: number;
  /** mean wall time from an attempt's first call to the end of its last, less its pacer waits */
  attemptDurationMs: number;
}

/** Ledger figures for a pool: this run's calls, or (run null) the pool's last day across runs. */
export async function poolObservations(
  db: Db,
  pool: string,
  run: string | null,
): Promise<PoolObservations | null> {
  const scope = run === null ? "created_at > now() - interval '1 day'" : "run_name = $2";
  const r = await db.query<Record<string, number | string | null>>(
    `WITH calls AS (
       SELECT run_name, cell_id, attempt, provider, input_tokens, output_tokens, cache_read_tokens,
              cache_write_tokens, latency_ms, COALESCE(pacer_wait_ms, 0) AS wait_ms, started_at
         FROM ledger_calls
        WHERE pool = $1 AND ${scope} AND status IN ('ok', 'cut') AND latency_ms IS NOT NULL
        ORDER BY created_at DESC LIMIT 5000
     ), attempts AS (
       SELECT GREATEST(sum(latency_ms)::float8,
                       EXTRACT(EPOCH FROM max(started_at + latency_ms * interval '1 millisecond') - min(started_at))
                         * 1000 - sum(wait_ms)) AS active_ms
         FROM calls GROUP BY run_name, cell_id, attempt
     )
     SELECT count(*)::int AS calls, max(provider) AS provider,
            avg(input_tokens)::float8 AS input, avg(output_tokens)::float8 AS output,
            avg(cache_read_tokens)::float8 AS cache_read, avg(cache_write_tokens)::float8 AS cache_write,
            percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms)::float8 AS p50,
            avg(latency_ms)::float8 AS mean,
            (SELECT count(*)::int FROM attempts) AS attempts,
            (SELECT avg(active_ms)::float8 FROM attempts) AS active_ms
       FROM calls`,
    run === null ? [pool] : [pool, run],
  );
  const x = r.rows[0];
  const n = (v: unknown) => Number(v ?? 0);
  if (!x || n(x.calls) === 0) return null;
  return {
    calls: n(x.calls),
    attempts: n(x.attempts),
    provider: typeof x.provider === "string" ? x.provider : null,
    inputTokensPerCall: n(x.input),
    cacheReadTokensPerCall: n(x.cache_read),
    cacheWriteTokensPerCall: n(x.cache_write),
    outputTokensPerCall: n(x.output),
    latencyP50Ms: n(x.p50),
    latencyMeanMs: n(x.mean),
    attemptDurationMs: n(x.active_ms),
  };
}
