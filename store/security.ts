import { type Col, col, insertBatched } from "./batch.js";
import type { Db } from "./db.js";

/** One thing the plane refused because it was forged (see protocol SECURITY_CHECKS). */
export interface SecurityEventRow {
  runName: string;
  /** which check refused it */
  check: string;
  cellId: string;
  attempt: number;
  /** what was refused, unique per check and attempt: `result`, a call id, a blob name */
  ref: string;
  /** the actor that refused it */
  actor: string;
  detail: string;
}

const COLUMNS: readonly Col<SecurityEventRow>[] = [
  col("runName", "run_name", "text"),
  col("check", "check_name", "text"),
  col("cellId", "cell_id", "text"),
  col("attempt", "attempt", "int"),
  col("ref", "ref", "text"),
  col("actor", "actor", "text"),
  col("detail", "detail", "text"),
];

/** Record refusals; one already recorded (a redelivered message refused again) is skipped. Returns how many were new. */
export async function insertSecurityEvents(db: Db, rows: readonly SecurityEventRow[]): Promise<number> {
  return insertBatched(db, "security_events", COLUMNS, rows, "ON CONFLICT DO NOTHING");
}

/** Refusals of a run, per check. */
export async function securityCounts(db: Db, runName: string): Promise<Record<string, number>> {
  const r = await db.query<{ check_name: string; n: string }>(
    "SELECT check_name, count(*)::text AS n FROM security_events WHERE run_name = $1 GROUP BY check_name",
    [runName],
  );
  return Object.fromEntries(r.rows.map((x) => [x.check_name, Number(x.n)]));
}

/** The run's refusals, oldest first (at most `limit`). */
export async function listSecurityEvents(
  db: Db,
  runName: string,
  limit = 100,
): Promise<Array<SecurityEventRow & { createdAt: string }>> {
  const r = await db.query<{
    check_name: string;
    cell_id: string;
    attempt: number;
    ref: string;
    actor: string;
    detail: string;
    created_at: Date | string;
  }>(
    `SELECT check_name, cell_id, attempt, ref, actor, detail, created_at FROM security_events
      WHERE run_name = $1 ORDER BY created_at, cell_id, attempt, ref LIMIT $2`,
    [runName, limit],
  );
  return r.rows.map((x) => ({
    runName,
    check: x.check_name,
    cellId: x.cell_id,
    attempt: Number(x.attempt),
    ref: x.ref,
    actor: x.actor,
    detail: x.detail,
    createdAt: new Date(x.created_at).toISOString(),
  }));
}
