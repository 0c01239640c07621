import type { Db } from "../store/db.js";

/** One cell whose ledger and gateway spend log disagree. */
export interface ReconcileFlag {
  cellId: string;
  ledgerNanoUsd: number;
  gatewayNanoUsd: number;
  harnessReportedNanoUsd: number | null;
  differenceNanoUsd: number;
  pendingCalls: number;
}

/**
 * Reconcile every finished attempt of a run in one pass: per cell, the shim's ledger (every call, voided retries
 * included, since the gateway saw and billed those too; the judge's calls are left out because they run under the
 * judge's own key), the gateway's spend log and the harness's own claim, written to reconciliation_results. A
 * difference, or a gateway row still pending (a replica died mid-call), is flagged.
 */
export async function reconcileRun(
  db: Db,
  run: string,
): Promise<{ cells: number; flagged: ReconcileFlag[] } | null> {
  // A run whose calls never went through a gateway (a direct upstream) has nothing to reconcile against.
  const seen = await db.query("SELECT 1 FROM gateway_spend_log WHERE run_name = $1 LIMIT 1", [run]);
  if (seen.rowCount === 0) return null;
  const rows = await db.query<{
    cell_id: string;
    ledger: number;
    gateway: number;
    pending: number;
    harness: string | null;
  }>(
    `WITH cells AS (
       SELECT cell_id, harness_metadata FROM run_results WHERE run_name = $1
     ), ledger AS (
       SELECT cell_id, SUM(cost_nano_usd)::bigint AS s FROM ledger_calls
        WHERE run_name = $1 AND trace_id NOT LIKE '%\\_\\_judge' GROUP BY cell_id
     ), gw AS (
       SELECT cell_id, SUM(cost_nano_usd)::bigint AS s, COUNT(*) FILTER (WHERE status = 'pending')::bigint AS pending
         FROM gateway_spend_log WHERE run_name = $1 AND cell_id IS NOT NULL GROUP BY cell_id
     )
     SELECT c.cell_id, COALESCE(l.s, 0)::bigint AS ledger, COALESCE(g.s, 0)::bigint AS gateway,
            COALESCE(g.pending, 0)::bigint AS pending,
            CASE WHEN c.harness_metadata ~ '^\\s*\\{'
                 THEN c.harness_metadata::jsonb ->> 'harness_reported_cost_nano_usd' END AS harness
       FROM cells c LEFT JOIN ledger l USING (cell_id) LEFT JOIN gw g USING (cell_id)`,
    [run],
  );
  const flagged: ReconcileFlag[] = [];
  for (const r of rows.rows) {
    const differenceNanoUsd = Number(r.gateway) - Number(r.ledger);
    const harness = r.harness === null || r.harness === "" ? null : Number(r.harness);
    const isFlagged = differenceNanoUsd !== 0 || Number(r.pending) > 0;
    await db.query(
      `INSERT INTO reconciliation_results
         (run_name, cell_id, ledger_nano_usd, gateway_nano_usd, harness_reported_nano_usd, difference_nano_usd, flagged)
       VALUES ($1, $2, $3, $4, $5, $6, $7)
       ON CONFLICT (run_name, cell_id) DO UPDATE SET ledger_nano_usd = EXCLUDED.ledger_nano_usd,
         gateway_nano_usd = EXCLUDED.gateway_nano_usd, harness_reported_nano_usd = EXCLUDED.harness_reported_nano_usd,
         difference_nano_usd = EXCLUDED.difference_nano_usd, flagged = EXCLUDED.flagged, created_at = now()`,
      [run, r.cell_id, Number(r.ledger), Number(r.gateway), harness, differenceNanoUsd, isFlagged],
    );
    if (isFlagged)
      flagged.push({
        cellId: r.cell_id,
        ledgerNanoUsd: Number(r.ledger),
        gatewayNanoUsd: Number(r.gateway),
        harnessReportedNanoUsd: harness,
        differenceNanoUsd,
        pendingCalls: Number(r.pending),
      });
  }
  return { cells: rows.rowCount, flagged };
}
