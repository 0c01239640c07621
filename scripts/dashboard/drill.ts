import type { ObjectStore } from "@nats-io/obj";
import type { Db } from "../../store/db.js";
import { nanoToNumber, usdToNano } from "../../store/money.js";

/*
 * One attempt in detail, read on click: its run_results row, its ledger calls, its phases (PostgreSQL) and its
 * patch and trajectory (object store). Large texts are cut so a page stays responsive.
 */

const PATCH_MAX = 200_000;
const TRAJECTORY_MAX = 100_000;
const LEDGER_MAX = 1_000;

export interface CellDetail {
  run: string;
  cellId: string;
  row: Record<string, unknown> | null;
  ledger: Array<Record<string, unknown>>;
  ledgerTotals: { calls: number; costNanoUsd: number; voidedNanoUsd: number };
  phases: Array<Record<string, unknown>>;
  patch: { source: "object store" | "run_results.diff" | "none"; text: string; truncated: boolean };
  trajectory: { text: string; truncated: boolean } | null;
}

function cut(text: string, max: number, keep: "head" | "tail"): { text: string; truncated: boolean } {
  if (text.length <= max) return { text, truncated: false };
  return { text: keep === "head" ? text.slice(0, max) : text.slice(text.length - max), truncated: true };
}

async function blobText(blobs: ObjectStore | null, ref: unknown): Promise<string | null> {
  if (!blobs || typeof ref !== "string" || ref === "") return null;
  const bytes = await blobs.getBlob(ref).catch(() => null);
  return bytes === null ? null : new TextDecoder().decode(bytes);
}

export async function cellDetail(
  db: Db,
  blobs: ObjectStore | null,
  run: string,
  cellId: string,
): Promise<CellDetail> {
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
  const r = row.rows[0] ?? null;
  const fromStore = await blobText(blobs, r?.patch_ref);
  const diff = typeof r?.diff === "string" ? r.diff : null;
  const patchText = fromStore ?? diff ?? "";
  const trajectory = await blobText(blobs, r?.trajectory_ref);
  const t = totals.rows[0];
  const rowOut = r ? { ...r } : null;
  if (rowOut) {
    delete rowOut.diff;
    rowOut.total_cost_nano_usd = r?.total_cost == null ? null : nanoToNumber(usdToNano(String(r.total_cost)));
  }
  return {
    run,
    cellId,
    row: rowOut,
    ledger: ledger.rows,
    ledgerTotals: {
      calls: Number(t?.n ?? 0),
      costNanoUsd: nanoToNumber(BigInt(t?.cost ?? "0")),
      voidedNanoUsd: nanoToNumber(BigInt(t?.voided ?? "0")),
    },
    phases: phases.rows,
    patch: {
      source: fromStore !== null ? "object store" : diff !== null ? "run_results.diff" : "none",
      ...cut(patchText, PATCH_MAX, "head"),
    },
    trajectory: trajectory === null ? null : cut(trajectory, TRAJECTORY_MAX, "tail"),
  };
}
