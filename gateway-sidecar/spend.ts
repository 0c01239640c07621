import type { TokenUsage } from "../providers/types.js";
import type { Db } from "../store/db.js";

/**
 * The gateway's own spend log: one row per upstream call in gateway_spend_log, independent of the shim's ledger.
 * A row is written `pending` with the call's worst-case cost BEFORE the call is forwarded and settled to the
 * metered cost after. So a replica that dies mid-call leaves a pending row holding the reservation — the call is
 * never missing from the log, and it is over-counted (safe), never under-counted — and the run's spend cap,
 * checked against the sum of all rows under a per-run lock, holds across any number of replicas.
 */

export type SpendStatus = "pending" | "ok" | "error" | "cut" | "client_closed" | "lost";

export interface SpendRow {
  requestId: string;
  run: string;
  cellId: string | null;
  traceId: string | null;
  alias: string;
  model: string;
}

export type ReserveOutcome = { ok: true } | { ok: false; spentNanoUsd: number; capNanoUsd: number };

/** Sum of the run's logged spend (pending reservations included), nano-USD. */
export async function runSpendNanoUsd(db: Db, run: string): Promise<number> {
  const r = await db.query<{ s: number }>(
    "SELECT COALESCE(SUM(cost_nano_usd), 0)::bigint AS s FROM gateway_spend_log WHERE run_name = $1",
    [run],
  );
  return Number(r.rows[0]?.s ?? 0);
}

/**
 * Log the call as pending with its reservation, refusing it when the run's logged spend plus the reservation
 * would pass the cap. The check and the insert share one transaction under a per-run advisory lock (PGlite is a
 * single session, already serial), so two replicas cannot both squeeze under the cap.
 */
export async function reserveSpend(
  db: Db,
  row: SpendRow,
  reserveNanoUsd: number,
  capNanoUsd: number | undefined,
): Promise<ReserveOutcome> {
  const insert = (tx: Db) =>
    tx.query(
      `INSERT INTO gateway_spend_log (request_id, run_name, cell_id, trace_id, alias, model, cost_nano_usd, status)
       VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending')`,
      [row.requestId, row.run, row.cellId, row.traceId, row.alias, row.model, reserveNanoUsd],
    );
  if (capNanoUsd === undefined) {
    await insert(db);
    return { ok: true };
  }
  return db.transaction(async (tx) => {
    if (tx.kind === "postgres")
      await tx.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`efgw:${row.run}`]);
    const spentNanoUsd = await runSpendNanoUsd(tx, row.run);
    if (spentNanoUsd + reserveNanoUsd > capNanoUsd) return { ok: false, spentNanoUsd, capNanoUsd };
    await insert(tx);
    return { ok: true } as const;
  });
}

/** Replace the reservation with the metered cost (0 for a call the provider refused before any output). */
export async function settleSpend(
  db: Db,
  requestId: string,
  status: SpendStatus,
  usage: TokenUsage | null,
  costNanoUsd: number,
  model?: string,
): Promise<void> {
  const u = usage ?? {
    inputTokens: 0,
    outputTokens: 0,
    cacheReadTokens: 0,
    cacheWriteTokens: 0,
    reasoningTokens: 0,
  };
  await db.query(
    `UPDATE gateway_spend_log SET status = $2, input_tokens = $3, output_tokens = $4, cache_read_tokens = $5,
       cache_write_tokens = $6, reasoning_tokens = $7, cost_nano_usd = $8, model = COALESCE($9, model)
     WHERE request_id = $1`,
    [
      requestId,
      status,
      u.inputTokens,
      u.outputTokens,
      u.cacheReadTokens,
      u.cacheWriteTokens,
      u.reasoningTokens,
      costNanoUsd,
      model ?? null,
    ],
  );
}

export interface Reconciliation {
  ledgerNanoUsd: number;
  gatewayNanoUsd: number;
  harnessReportedNanoUsd: number | null;
  /** gateway − ledger */
  differenceNanoUsd: number;
  flagged: boolean;
  /** gateway rows of the cell still pending (a replica died mid-call): their cost is a reservation */
  pendingCalls: number;
}

/**
 * Reconcile one finished attempt's cell: the shim's ledger total against the gateway's own log (and the harness's
 * self-report where it printed one). Money is exact integers, so any difference beyond `toleranceNanoUsd`
 * (default 0) is flagged; the caller publishes the flag as a run event. Upserts reconciliation_results.
 */
export async function reconcileAttempt(
  db: Db,
  run: string,
  cell: string,
  ledgerNanoUsd: number,
  harnessReportedNanoUsd?: number,
  opts: { toleranceNanoUsd?: number } = {},
): Promise<Reconciliation> {
  const r = await db.query<{ s: number; pending: number }>(
    `SELECT COALESCE(SUM(cost_nano_usd), 0)::bigint AS s,
            COUNT(*) FILTER (WHERE status = 'pending')::bigint AS pending
     FROM gateway_spend_log WHERE run_name = $1 AND cell_id = $2`,
    [run, cell],
  );
  const gatewayNanoUsd = Number(r.rows[0]?.s ?? 0);
  const pendingCalls = Number(r.rows[0]?.pending ?? 0);
  const differenceNanoUsd = gatewayNanoUsd - ledgerNanoUsd;
  const flagged = Math.abs(differenceNanoUsd) > (opts.toleranceNanoUsd ?? 0) || pendingCalls > 0;
  await db.query(
    `INSERT INTO reconciliation_results
       (run_name, cell_id, ledger_nano_usd, gateway_nano_usd, harness_reported_nano_usd, difference_nano_usd, flagged)
     VALUES ($1, $2, $3, $4, $5, $6, $7)
     ON CONFLICT (run_name, cell_id) DO UPDATE SET ledger_nano_usd = EXCLUDED.ledger_nano_usd,
       gateway_nano_usd = EXCLUDED.gateway_nano_usd, harness_reported_nano_usd = EXCLUDED.harness_reported_nano_usd,
       difference_nano_usd = EXCLUDED.difference_nano_usd, flagged = EXCLUDED.flagged, created_at = now()`,
    [run, cell, ledgerNanoUsd, gatewayNanoUsd, harnessReportedNanoUsd ?? null, differenceNanoUsd, flagged],
  );
  return {
    ledgerNanoUsd,
    gatewayNanoUsd,
    harnessReportedNanoUsd: harnessReportedNanoUsd ?? null,
    differenceNanoUsd,
    flagged,
    pendingCalls,
  };
}
