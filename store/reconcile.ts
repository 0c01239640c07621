import type { Db } from "./db.js";
import { lockCells, refreshAttemptTotals, refreshPhaseTotals, voidSuperseded } from "./writer.js";

/** One cell's reconciliation: the ledger's, the gateway's and the harness's own cost, and whether they disagree. */
export interface ReconciliationRow {
  run: string;
  cell: string;
  ledgerNanoUsd: number;
  gatewayNanoUsd: number;
  harnessReportedNanoUsd: number | null;
  differenceNanoUsd: number;
  flagged: boolean;
}

/** Writes a cell's reconciliation, replacing an earlier one of the same cell. */
export async function saveReconciliation(db: Db, row: ReconciliationRow): Promise<void> {
  await db.query(
    `INSERT INTO reconciliation_results
       (run_name, cell_id, ledger_nano_usd, gateway_nano_usd, harness_reported_nano_usd, difference_nano_usd, flagged)
     VALUES ($1, $2, $3, $4, $5, $6, $7)
     ON CONFLICT (run_name, cell_id) DO UPDATE SET ledger_nano_usd = EXCLUDED.ledger_nano_usd,
       gateway_nano_usd = EXCLUDED.gateway_nano_usd, harness_reported_nano_usd = EXCLUDED.harness_reported_nano_usd,
       difference_nano_usd = EXCLUDED.difference_nano_usd, flagged = EXCLUDED.flagged, created_at = now()`,
    [
      row.run,
      row.cell,
      row.ledgerNanoUsd,
      row.gatewayNanoUsd,
      row.harnessReportedNanoUsd,
      row.differenceNanoUsd,
      row.flagged,
    ],
  );
}

/** How many of the run's cells were reconciled, and how many of them were flagged. */
export async function reconciliationSummary(
  db: Db,
  run: string,
): Promise<{ cells: number; flagged: number }> {
  const r = await db.query<{ n: number; flagged: number }>(
    "SELECT count(*)::int AS n, count(*) FILTER (WHERE flagged)::int AS flagged FROM reconciliation_results WHERE run_name = $1",
    [run],
  );
  return { cells: Number(r.rows[0]?.n ?? 0), flagged: Number(r.rows[0]?.flagged ?? 0) };
}

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
 * included, since the gateway saw and billed those too; the judge's calls as well: it calls under a key of the
 * run's own, so the gateway logs them under the run and cell it judged), the gateway's spend log and the harness's own claim, written to reconciliation_results. A
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
        WHERE run_name = $1 GROUP BY cell_id
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
    await saveReconciliation(db, {
      run,
      cell: r.cell_id,
      ledgerNanoUsd: Number(r.ledger),
      gatewayNanoUsd: Number(r.gateway),
      harnessReportedNanoUsd: harness,
      differenceNanoUsd,
      flagged: isFlagged,
    });
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

/** Gateway statuses whose figures are metered from what the provider sent (not a reservation). */
const METERED = "('ok', 'cut', 'error')";
/**
 * Gateway statuses whose call was cut on the gateway's side after it was forwarded, or whose replica was killed
 * holding it (`orphaned`): the reservation is the cost.
 */
const RESERVED = "('lost', 'client_closed', 'orphaned')";
/**
 * Gateway statuses of a call whose reservation was trued up to the provider's usage report (gateway/true-up.ts):
 * `reported` exactly (the only such call of its model in the run), `apportioned` its share of what the report holds
 * beyond the metered calls (the run's total is exact, the split between its calls an estimate).
 */
const TRUED = "('reported', 'apportioned')";
const SETTLED = `(${[METERED, RESERVED, TRUED].map((x) => x.slice(1, -1)).join(", ")})`;
const ESTIMATED = "(g.status IN ('lost', 'client_closed', 'orphaned', 'apportioned'))";
/**
 * A shim row that could not meter its call: its connection was lost after the send, an error with nothing metered
 * (a load balancer's 502 when the gateway replica behind it died holding the call), or its answer was cut.
 */
const UNMETERED_SHIM_ROW =
  "((l.status = 'error' AND (l.http_status IS NULL OR l.cost_nano_usd = 0)) OR l.status = 'cut')";

/**
 * Settle from the gateway's spend log the calls the shim could not meter, so the ledger holds every forwarded
 * call (`source = 'gateway'`):
 * - a call with no ledger row (its shim was killed, or died before it published) gets one, under the shim's own
 *   call id (x-evalfleet-call), else `gateway:<request id>`;
 * - a shim row that saw no answer (its connection lost after the send) or a cut one takes the gateway's figures
 *   when they differ: the gateway reads every forwarded call to its end, whoever left; when the gateway could not
 *   (it cut the call, or its replica was killed holding it: `orphaned`, see settleOrphans), its reservation.
 * A call the shim metered is never counted twice: rows are matched by call id. Rows still `pending` (a replica not
 * yet known dead, or PostgreSQL down when it settled) hold a reservation, not a cost, and are left to the
 * reconciliation's flag; a call the gateway itself cut (`lost`, `client_closed`) or a killed replica held
 * (`orphaned`) settles at its reservation, marked estimated, and again at the provider's figures once the gateway has
 * trued it up to the provider's usage report (`reported`; `apportioned` stays marked estimated). Idempotent. In one
 * transaction with the cells' locks, voiding and attempt totals, as the ledger consumer's batches do. Returns how
 * many ledger rows were added or changed.
 */
export async function settleFromGateway(db: Db, run: string): Promise<number> {
  const owned = "g.run_name = $1 AND g.cell_id IS NOT NULL";
  const settles = `${owned} AND g.cost_nano_usd > 0`;
  const cells = await db.query<{ cell_id: string }>(
    `SELECT DISTINCT g.cell_id FROM gateway_spend_log g
      WHERE ${owned} AND g.status IN ${SETTLED} AND (
        g.cost_nano_usd > 0 AND NOT EXISTS (SELECT 1 FROM ledger_calls l WHERE l.call_id = COALESCE(g.call_id, 'gateway:' || g.request_id))
        OR g.cost_nano_usd > 0 AND EXISTS (SELECT 1 FROM ledger_calls l WHERE l.call_id = g.call_id
              AND l.run_name = $1 AND l.source = 'shim' AND ${UNMETERED_SHIM_ROW}
              AND l.cost_nano_usd <> g.cost_nano_usd)
        OR g.status IN ${TRUED} AND EXISTS (SELECT 1 FROM ledger_calls l
              WHERE l.call_id = COALESCE(g.call_id, 'gateway:' || g.request_id) AND l.run_name = $1
                AND l.source = 'gateway' AND l.status IS DISTINCT FROM g.status))`,
    [run],
  );
  if (cells.rows.length === 0) return 0;
  const keys = cells.rows.map((r) => ({ runName: run, cellId: r.cell_id }));
  return db.transaction(async (tx) => {
    await lockCells(tx, keys);
    const added = await tx.query(
      `INSERT INTO ledger_calls (call_id, run_name, cell_id, attempt, trace_id, model, alias, status,
         input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_nano_usd,
         price_version, estimated, source, started_at)
       SELECT COALESCE(g.call_id, 'gateway:' || g.request_id), g.run_name, g.cell_id, COALESCE(g.attempt, 0),
              g.trace_id, g.model, g.alias, g.status, g.input_tokens, g.output_tokens, g.cache_read_tokens,
              g.cache_write_tokens, g.reasoning_tokens, g.cost_nano_usd, g.price_version,
              ${ESTIMATED}, 'gateway', g.created_at
         FROM gateway_spend_log g
        WHERE ${settles} AND g.status IN ${SETTLED}
       ON CONFLICT (call_id) DO NOTHING`,
      [run],
    );
    const set = `status = g.status, input_tokens = g.input_tokens, output_tokens = g.output_tokens,
         cache_read_tokens = g.cache_read_tokens, cache_write_tokens = g.cache_write_tokens,
         reasoning_tokens = g.reasoning_tokens, cost_nano_usd = g.cost_nano_usd,
         price_version = COALESCE(g.price_version, l.price_version), estimated = ${ESTIMATED}, source = 'gateway'`;
    const changed = await tx.query(
      `UPDATE ledger_calls l SET ${set}
         FROM gateway_spend_log g
        WHERE ${settles} AND g.status IN ${SETTLED} AND l.call_id = g.call_id AND l.run_name = $1
          AND l.source = 'shim' AND ${UNMETERED_SHIM_ROW} AND l.cost_nano_usd <> g.cost_nano_usd`,
      [run],
    );
    // A call settled at its reservation and trued up since to the provider's report.
    const trued = await tx.query(
      `UPDATE ledger_calls l SET ${set}
         FROM gateway_spend_log g
        WHERE ${owned} AND g.status IN ${TRUED} AND l.call_id = COALESCE(g.call_id, 'gateway:' || g.request_id)
          AND l.run_name = $1 AND l.source = 'gateway' AND l.status IS DISTINCT FROM g.status`,
      [run],
    );
    const n = added.rowCount + changed.rowCount + trued.rowCount;
    if (n === 0) return 0;
    await voidSuperseded(tx, keys);
    await refreshAttemptTotals(tx, keys);
    await refreshPhaseTotals(tx, keys);
    return n;
  });
}
