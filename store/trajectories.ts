import { nanoToNumber } from "../protocol/money.js";
import type { Db } from "./db.js";

/*
 * What `evalfleet trajectories` and the dashboard's step view read: each cell's attempt row (its latest attempt)
 * and every ledger call of the cell, in the order they were made, with the attempt they belong to.
 */

export interface TrajectoryCell {
  cellId: string;
  harness: string | null;
  model: string | null;
  taskId: string | null;
  repeat: number | null;
  /** the latest attempt; earlier ones (retried) have their own blobs and ledger rows */
  attempt: number;
  status: string | null;
  gradeStatus: string | null;
  resolved: boolean | null;
  errorClass: string | null;
}

export interface TrajectoryCall {
  cellId: string;
  attempt: number;
  callId: string;
  model: string | null;
  status: string;
  httpStatus: number | null;
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  reasoningTokens: number;
  costNanoUsd: number;
  latencyMs: number | null;
  ttfbMs: number | null;
  pacerWaitMs: number | null;
  retries: number | null;
  estimated: boolean;
  voided: boolean;
  priceVersion: string | null;
  startedAt: string | null;
}

const n = (v: unknown): number => (v === null || v === undefined ? 0 : Number(v));
const nOrNull = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

export async function loadTrajectoryCells(db: Db, run: string, cellId?: string): Promise<TrajectoryCell[]> {
  const r = await db.query<Record<string, unknown>>(
    `SELECT cell_id, harness, model, task_id, repeat, attempt, status, grade_status, resolved, error_class
       FROM run_results WHERE run_name = $1 AND ($2::text IS NULL OR cell_id = $2) ORDER BY cell_id`,
    [run, cellId ?? null],
  );
  return r.rows.map((x) => ({
    cellId: String(x.cell_id),
    harness: (x.harness as string | null) ?? null,
    model: (x.model as string | null) ?? null,
    taskId: (x.task_id as string | null) ?? null,
    repeat: nOrNull(x.repeat),
    attempt: n(x.attempt),
    status: (x.status as string | null) ?? null,
    gradeStatus: (x.grade_status as string | null) ?? null,
    resolved: (x.resolved as boolean | null) ?? null,
    errorClass: (x.error_class as string | null) ?? null,
  }));
}

export async function loadTrajectoryCalls(db: Db, run: string, cellId?: string): Promise<TrajectoryCall[]> {
  const r = await db.query<Record<string, unknown>>(
    `SELECT cell_id, attempt, call_id, model, status, http_status, input_tokens, output_tokens, cache_read_tokens,
            cache_write_tokens, reasoning_tokens, cost_nano_usd::text AS cost, latency_ms, ttfb_ms, pacer_wait_ms,
            retries, estimated, voided, price_version,
            to_char(COALESCE(started_at, created_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS at
       FROM ledger_calls WHERE run_name = $1 AND ($2::text IS NULL OR cell_id = $2)
      ORDER BY cell_id, attempt, COALESCE(started_at, created_at), call_id`,
    [run, cellId ?? null],
  );
  return r.rows.map((x) => ({
    cellId: String(x.cell_id),
    attempt: n(x.attempt),
    callId: String(x.call_id),
    model: (x.model as string | null) ?? null,
    status: String(x.status),
    httpStatus: nOrNull(x.http_status),
    inputTokens: n(x.input_tokens),
    outputTokens: n(x.output_tokens),
    cacheReadTokens: n(x.cache_read_tokens),
    cacheWriteTokens: n(x.cache_write_tokens),
    reasoningTokens: n(x.reasoning_tokens),
    costNanoUsd: nanoToNumber(BigInt(String(x.cost ?? "0"))),
    latencyMs: nOrNull(x.latency_ms),
    ttfbMs: nOrNull(x.ttfb_ms),
    pacerWaitMs: nOrNull(x.pacer_wait_ms),
    retries: nOrNull(x.retries),
    estimated: x.estimated === true,
    voided: x.voided === true,
    priceVersion: (x.price_version as string | null) ?? null,
    startedAt: (x.at as string | null) ?? null,
  }));
}
