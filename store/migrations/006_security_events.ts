import type { Db } from "../db.js";
import { createTableSql, type Migration, type TableSpec } from "./types.js";

/*
 * What the plane refused because it was forged (store/security.ts): one row per refused thing, keyed by what it was,
 * so a redelivered message refused again adds nothing. `watch` and the report count them per run.
 */
export const SECURITY_EVENTS: TableSpec = {
  name: "security_events",
  columns: [
    { name: "run_name", type: "text", notNull: true },
    { name: "check_name", type: "text", notNull: true },
    { name: "cell_id", type: "text", notNull: true },
    { name: "attempt", type: "integer", notNull: true },
    { name: "ref", type: "text", notNull: true },
    { name: "actor", type: "text", notNull: true },
    { name: "detail", type: "text", notNull: true },
    { name: "created_at", type: "timestamp with time zone", notNull: true, default: "now()" },
  ],
  constraints: ["PRIMARY KEY (run_name, check_name, cell_id, attempt, ref)"],
};

async function up(tx: Db): Promise<void> {
  await tx.query(createTableSql(SECURITY_EVENTS));
}

export const migration006: Migration = { version: 6, name: "security_events", up };
