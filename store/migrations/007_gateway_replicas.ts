import type { Db } from "../db.js";
import type { Migration } from "./types.js";

/*
 * Which gateway replica holds each call in flight, and when each replica last said it was alive: a pending row of a
 * replica that stopped heartbeating is a call nobody will settle (the replica was killed mid-call), so the sweep
 * (store/spend.ts settleOrphans) settles it at its reservation instead of leaving it out of every total; the
 * gateway trues such calls up to the provider's usage report later (gateway/true-up.ts).
 */
const STATEMENTS = [
  `CREATE TABLE IF NOT EXISTS gateway_replicas (
    replica_id TEXT PRIMARY KEY,
    host TEXT,
    started_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    seen_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    stopped_at TIMESTAMPTZ
  )`,
  "ALTER TABLE gateway_spend_log ADD COLUMN IF NOT EXISTS replica_id TEXT",
  "CREATE INDEX IF NOT EXISTS gateway_spend_log_pending ON gateway_spend_log (replica_id) WHERE status = 'pending'",
  // the calls whose cost is a reservation (the true-up's candidates) and those trued up since (gateway/true-up.ts)
  `CREATE INDEX IF NOT EXISTS gateway_spend_log_guessed ON gateway_spend_log (run_name)
     WHERE status IN ('lost', 'client_closed', 'orphaned', 'reported', 'apportioned')`,
];

async function up(tx: Db): Promise<void> {
  for (const sql of STATEMENTS) await tx.query(sql);
}

export const migration007: Migration = { version: 7, name: "gateway_replicas", up };
