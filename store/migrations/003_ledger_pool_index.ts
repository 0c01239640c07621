import type { Db } from "../db.js";
import type { Migration } from "./types.js";

/*
 * The planner's fleet sizing reads each pool's latest ledger calls every 15 s (actors/planner/fleet.ts
 * poolObservations in store/ledger.ts): across runs by (pool, created_at), within a run by (run_name, pool, created_at). Without these the
 * query scans the whole ledger, which grows by millions of rows per large run.
 */
const STATEMENTS = [
  "CREATE INDEX IF NOT EXISTS ledger_calls_pool_created ON ledger_calls (pool, created_at)",
  "CREATE INDEX IF NOT EXISTS ledger_calls_run_pool_created ON ledger_calls (run_name, pool, created_at)",
];

async function up(tx: Db): Promise<void> {
  for (const sql of STATEMENTS) await tx.query(sql);
}

export const migration003: Migration = { version: 3, name: "ledger_pool_index", up };
