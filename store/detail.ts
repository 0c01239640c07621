import { nanoToNumber } from "../protocol/money.js";
import type { Db } from "./db.js";

/** One attempt's rows for the dashboard's drill-down: its run_results row, ledger calls (the first 1,000), phases. */
export interface CellDetailRows {
  row: Record<string, unknown> | null;
  ledger: Array<Record<string, unknown>>;
  /** over every ledger row of the cell, not only the ones listed */
  totals: { calls: number; costNanoUsd: number; voidedNanoUsd: number };
  phases: Array<Record<string, unknown>>;
}

const LEDGER_MAX = 1_000;

export async function cellDetailRows(db: Db, run: string, cellId: string): Promise<CellDetailRows> {
  const [row, ledger, totals, phases] = await Promise.all([
    db.query<Record<string, unknown>>(
      `SELECT cell_id, attempt, harness, model, review_model, task_id, track, repeat, status, exit_class, success,
              error_class, error_message, total_cost::text AS total_cost, billable_cost::text AS billable_cost,
              input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens,
              latency_ms, num_api_calls, num_tool_calls, cost_mode, patch_ref, trajectory_ref, diff,
              grade_status, resolved, grade_report, graded_at, verdict_score, verdict
         FROM run_results WHERE run_name = $1 AND cell_id = $2`,
      [run, cellId],
    ),
    db.query<Record<string, unknown>>(
      `SELECT call_id, attempt, trace_id, model, status, http_status, input_tokens, output_tokens,
              cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_nano_usd, latency_ms, pacer_wait_ms,
              retries, estimated, voided, created_at
         FROM ledger_calls WHERE run_name = $1 AND cell_id = $2 ORDER BY created_at, call_id LIMIT ${LEDGER_MAX}`,
      [run, cellId],
    ),
    db.query<{ n: number; cost: string; voided: string }>(
      `SELECT count(*) AS n, COALESCE(sum(cost_nano_usd), 0)::text AS cost,
              COALESCE(sum(cost_nano_usd) FILTER (WHERE voided), 0)::text AS voided
         FROM ledger_calls WHERE run_name = $1 AND cell_id = $2`,
      [run, cellId],
    ),
    db.query<Record<string, unknown>>(
      `SELECT phase_name, attempt, model, model_role, exit_code, duration_ms, timed_out, input_tokens, output_tokens,
              total_cost::text AS total_cost, num_api_calls, error
         FROM phase_results WHERE run_name = $1 AND cell_id = $2 ORDER BY attempt, id`,
      [run, cellId],
    ),
  ]);
  const t = totals.rows[0];
  return {
    row: row.rows[0] ?? null,
    ledger: ledger.rows,
    totals: {
      calls: Number(t?.n ?? 0),
      costNanoUsd: nanoToNumber(BigInt(t?.cost ?? "0")),
      voidedNanoUsd: nanoToNumber(BigInt(t?.voided ?? "0")),
    },
    phases: phases.rows,
  };
}
