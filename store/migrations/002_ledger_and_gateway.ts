import type { Db } from "../db.js";
import type { Migration } from "./types.js";

/*
 * The per-call ledger (the truth about money), the gateway's independent spend log it is reconciled against,
 * run virtual keys, the grade cache and task validation. Plain DDL: these tables have no legacy shape.
 */
const STATEMENTS = [
  `CREATE TABLE IF NOT EXISTS ledger_calls (
    call_id TEXT PRIMARY KEY,
    run_name TEXT NOT NULL,
    cell_id TEXT NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    trace_id TEXT,
    model TEXT,
    alias TEXT,
    pool TEXT,
    provider TEXT,
    status TEXT NOT NULL,
    http_status INTEGER,
    input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    reasoning_tokens BIGINT NOT NULL DEFAULT 0,
    cost_nano_usd BIGINT NOT NULL,
    price_version TEXT,
    latency_ms INTEGER,
    ttfb_ms INTEGER,
    pacer_wait_ms INTEGER,
    retries INTEGER,
    clamped_max_tokens INTEGER,
    estimated BOOLEAN NOT NULL DEFAULT false,
    voided BOOLEAN NOT NULL DEFAULT false,
    voided_at TIMESTAMPTZ,
    cost_mode TEXT,
    started_at TIMESTAMPTZ,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
  )`,
  "CREATE INDEX IF NOT EXISTS ledger_calls_run_cell ON ledger_calls (run_name, cell_id)",
  // text_pattern_ops: voiding by trace-id prefix is a LIKE 'prefix%' that this index can serve; equality still can.
  "CREATE INDEX IF NOT EXISTS ledger_calls_run_trace ON ledger_calls (run_name, trace_id text_pattern_ops)",
  `CREATE TABLE IF NOT EXISTS gateway_spend_log (
    request_id TEXT PRIMARY KEY,
    run_name TEXT,
    cell_id TEXT,
    trace_id TEXT,
    alias TEXT,
    model TEXT,
    input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cache_read_tokens BIGINT NOT NULL DEFAULT 0,
    cache_write_tokens BIGINT NOT NULL DEFAULT 0,
    reasoning_tokens BIGINT NOT NULL DEFAULT 0,
    cost_nano_usd BIGINT NOT NULL DEFAULT 0,
    status TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
  )`,
  "CREATE INDEX IF NOT EXISTS gateway_spend_log_run_cell ON gateway_spend_log (run_name, cell_id)",
  "CREATE INDEX IF NOT EXISTS gateway_spend_log_run_trace ON gateway_spend_log (run_name, trace_id text_pattern_ops)",
  `CREATE TABLE IF NOT EXISTS virtual_keys (
    key_hash TEXT PRIMARY KEY,
    run_name TEXT NOT NULL,
    key_prefix TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at TIMESTAMPTZ
  )`,
  "CREATE INDEX IF NOT EXISTS virtual_keys_run ON virtual_keys (run_name)",
  `CREATE TABLE IF NOT EXISTS grade_cache (
    cache_key TEXT PRIMARY KEY,
    instance_id TEXT NOT NULL,
    image_digest TEXT NOT NULL,
    patch_hash TEXT NOT NULL,
    grader_version TEXT NOT NULL,
    status TEXT NOT NULL,
    report JSONB,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
  )`,
  `CREATE TABLE IF NOT EXISTS task_validation (
    task_id TEXT PRIMARY KEY,
    valid BOOLEAN NOT NULL,
    reason TEXT,
    image_digest TEXT,
    validated_at TIMESTAMPTZ NOT NULL DEFAULT now()
  )`,
];

async function up(tx: Db): Promise<void> {
  for (const sql of STATEMENTS) await tx.query(sql);
}

export const migration002: Migration = { version: 2, name: "ledger_and_gateway", up };
