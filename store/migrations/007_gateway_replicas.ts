import type { Db } from "../db.js";
import type { Migration } from "./types.js";

/*
 * Which gateway replica holds each call in flight, and when each replica last said it was alive: a pending row of a
 * replica that stopped heartbeating is a call nobody will settle (the replica was killed mid-call), so the sweep
 * (store/spend.ts settleOrphans) settles it at its reservation instead of leaving it out of every total.
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
];

async function up(tx: Db): Promise<void> {
  for (const sql of STATEMENTS) await tx.query(sql);
}

export const migration007: Migration = { version: 7, name: "gateway_replicas", up };
