import { createHash, randomBytes } from "node:crypto";
import type { Db } from "../store/db.js";

/**
 * One virtual key per run, made when the run is planned and revoked when it finishes or is torn down. Only the
 * sha256 of a key is stored; the plaintext is returned once, to be handed to the run's tasks. A key is
 * `efk-` + 43 base64url characters (256 random bits), so a hash lookup needs no salt or slow KDF: it cannot be
 * brute-forced, and the lookup must stay cheap because it runs on every call.
 */

export const KEY_PREFIX = "efk-";

export function hashKey(plaintext: string): string {
  return createHash("sha256").update(plaintext, "utf8").digest("hex");
}

/** Create a key for `run` and return its plaintext. Several live keys per run are allowed (a re-plan, a judge). */
export async function createRunKey(db: Db, run: string): Promise<string> {
  const key = KEY_PREFIX + randomBytes(32).toString("base64url");
  await db.query("INSERT INTO virtual_keys (key_hash, run_name, key_prefix) VALUES ($1, $2, $3)", [
    hashKey(key),
    run,
    key.slice(0, KEY_PREFIX.length + 6),
  ]);
  return key;
}

/** Revoke every live key of `run`; returns how many were revoked. Idempotent. */
export async function revokeRunKeys(db: Db, run: string): Promise<number> {
  const r = await db.query(
    "UPDATE virtual_keys SET revoked_at = now() WHERE run_name = $1 AND revoked_at IS NULL",
    [run],
  );
  return r.rowCount;
}

/** The run a presented key belongs to, or undefined for an unknown, malformed or revoked key (never which). */
export async function runForKey(db: Db, presented: string): Promise<string | undefined> {
  if (!presented.startsWith(KEY_PREFIX) || presented.length > 200) return undefined;
  const r = await db.query<{ run_name: string; revoked_at: unknown }>(
    "SELECT run_name, revoked_at FROM virtual_keys WHERE key_hash = $1",
    [hashKey(presented)],
  );
  const row = r.rows[0];
  return row && row.revoked_at === null ? row.run_name : undefined;
}
