import type { Db } from "../db.js";
import type { Migration } from "./types.js";

/*
 * Money that settles and caps that hold (issue 17, 14.4):
 * - ledger_calls.source: who metered the row — the shim ('shim'), the gateway's spend log for a call the shim
 *   could not meter ('gateway'), the judge ('judge'). price_version already names the data that priced it.
 * - gateway_spend_log: the shim's call id (one per try) to match a row to its ledger row, the key that made the call
 *   (per-key caps), the attempt, whether its cell is budget-exempt (the run cap skips exempt spend), and the
 *   version of the prices that settled it.
 * - virtual_keys: what a key is for — a run, one attempt of one cell (with its models and cap), or the judge of a
 *   run (with its cap) — so the gateway enforces the attempt's cap even if the shim in front of it is subverted.
 */
const STATEMENTS = [
  "ALTER TABLE ledger_calls ADD COLUMN IF NOT EXISTS source TEXT NOT NULL DEFAULT 'shim'",
  "ALTER TABLE gateway_spend_log ADD COLUMN IF NOT EXISTS call_id TEXT",
  "ALTER TABLE gateway_spend_log ADD COLUMN IF NOT EXISTS key_hash TEXT",
  "ALTER TABLE gateway_spend_log ADD COLUMN IF NOT EXISTS attempt INTEGER",
  "ALTER TABLE gateway_spend_log ADD COLUMN IF NOT EXISTS exempt BOOLEAN NOT NULL DEFAULT false",
  "ALTER TABLE gateway_spend_log ADD COLUMN IF NOT EXISTS price_version TEXT",
  "CREATE INDEX IF NOT EXISTS gateway_spend_log_key ON gateway_spend_log (key_hash)",
  "CREATE INDEX IF NOT EXISTS gateway_spend_log_call ON gateway_spend_log (call_id)",
  "ALTER TABLE virtual_keys ADD COLUMN IF NOT EXISTS kind TEXT NOT NULL DEFAULT 'run'",
  "ALTER TABLE virtual_keys ADD COLUMN IF NOT EXISTS cell_id TEXT",
  "ALTER TABLE virtual_keys ADD COLUMN IF NOT EXISTS attempt INTEGER",
  "ALTER TABLE virtual_keys ADD COLUMN IF NOT EXISTS models TEXT",
  "ALTER TABLE virtual_keys ADD COLUMN IF NOT EXISTS cap_nano_usd BIGINT",
  "ALTER TABLE virtual_keys ADD COLUMN IF NOT EXISTS exempt BOOLEAN NOT NULL DEFAULT false",
  "CREATE INDEX IF NOT EXISTS virtual_keys_attempt ON virtual_keys (run_name, cell_id, attempt)",
];

async function up(tx: Db): Promise<void> {
  for (const sql of STATEMENTS) await tx.query(sql);
}

export const migration004: Migration = { version: 4, name: "money", up };
