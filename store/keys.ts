import { createHash, randomBytes } from "node:crypto";
import type { Db } from "./db.js";

/**
 * Gateway virtual keys. Only the sha256 of a key is stored; the plaintext is returned once, to be handed to whoever
 * calls with it. A key is `efk-` + 43 base64url characters (256 random bits), so a hash lookup needs no salt or slow
 * KDF: it cannot be brute-forced, and the lookup must stay cheap because it runs on every call.
 *
 * Kinds:
 * - `attempt`: minted by the dispatcher when it launches one attempt of one cell, bound to that cell, attempt and the
 *   cell's model(s), capped at the attempt's `max_cost_usd`, carrying the cell's budget exemption; revoked when the
 *   attempt ends. The gateway enforces all of it, so the caps hold even if the shim in front of it is subverted.
 * - `judge`: the judge's key for one run, capped at the run's budget and revoked with the run's keys.
 * - `run`: the run-wide key of earlier builds (and of tests that call the gateway directly).
 */

export const KEY_PREFIX = "efk-";

export type KeyKind = "run" | "attempt" | "judge";

/** What a presented key may do. */
export interface KeyInfo {
  keyHash: string;
  run: string;
  kind: KeyKind;
  cellId: string | null;
  attempt: number | null;
  /** the model ids (gateway aliases) it may call; null: any of the run's */
  models: string[] | null;
  /** its own spend cap in nano-USD; null: none (the run's cap still applies) */
  capNanoUsd: number | null;
  /** its spend never counts against the run's cap (a subscription cell) */
  exempt: boolean;
}

export function hashKey(plaintext: string): string {
  return createHash("sha256").update(plaintext, "utf8").digest("hex");
}

function newKey(): string {
  return KEY_PREFIX + randomBytes(32).toString("base64url");
}

async function insertKey(db: Db, row: Omit<KeyInfo, "keyHash">): Promise<string> {
  const key = newKey();
  await db.query(
    `INSERT INTO virtual_keys (key_hash, run_name, key_prefix, kind, cell_id, attempt, models, cap_nano_usd, exempt)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    [
      hashKey(key),
      row.run,
      key.slice(0, KEY_PREFIX.length + 6),
      row.kind,
      row.cellId,
      row.attempt,
      row.models === null ? null : JSON.stringify(row.models),
      row.capNanoUsd,
      row.exempt,
    ],
  );
  return key;
}

/** Create a run-wide key for `run` and return its plaintext. Several live keys per run are allowed. */
export async function createRunKey(db: Db, run: string): Promise<string> {
  return await insertKey(db, {
    run,
    kind: "run",
    cellId: null,
    attempt: null,
    models: null,
    capNanoUsd: null,
    exempt: false,
  });
}

/** The key of one attempt: its cell, its model(s), its cap and its exemption, all enforced by the gateway. */
export async function createAttemptKey(
  db: Db,
  a: {
    run: string;
    cellId: string;
    attempt: number;
    models: string[];
    capNanoUsd: number | null;
    exempt: boolean;
  },
): Promise<string> {
  return await insertKey(db, {
    run: a.run,
    kind: "attempt",
    cellId: a.cellId,
    attempt: a.attempt,
    models: a.models,
    capNanoUsd: a.capNanoUsd,
    exempt: a.exempt,
  });
}

/** The judge's key for one run, capped (at the run's budget) and revoked with the run's other keys. */
export async function createJudgeKey(
  db: Db,
  j: { run: string; models: string[]; capNanoUsd: number | null },
): Promise<string> {
  return await insertKey(db, {
    run: j.run,
    kind: "judge",
    cellId: null,
    attempt: null,
    models: j.models,
    capNanoUsd: j.capNanoUsd,
    exempt: false,
  });
}

/** Revoke every live key of `run` (attempt and judge keys included); returns how many were revoked. Idempotent. */
export async function revokeRunKeys(db: Db, run: string): Promise<number> {
  const r = await db.query(
    "UPDATE virtual_keys SET revoked_at = now() WHERE run_name = $1 AND revoked_at IS NULL",
    [run],
  );
  return r.rowCount;
}

/** Revoke the keys of one attempt (its end: result, timeout, cancel, the task's death). Idempotent. */
export async function revokeAttemptKeys(
  db: Db,
  run: string,
  cellId: string,
  attempt: number,
): Promise<number> {
  const r = await db.query(
    `UPDATE virtual_keys SET revoked_at = now()
      WHERE run_name = $1 AND cell_id = $2 AND attempt = $3 AND kind = 'attempt' AND revoked_at IS NULL`,
    [run, cellId, attempt],
  );
  return r.rowCount;
}

/** What a presented key may do, or undefined for an unknown, malformed or revoked key (never which). */
export async function keyInfo(db: Db, presented: string): Promise<KeyInfo | undefined> {
  if (!presented.startsWith(KEY_PREFIX) || presented.length > 200) return undefined;
  const keyHash = hashKey(presented);
  const r = await db.query<{
    run_name: string;
    revoked_at: unknown;
    kind: string | null;
    cell_id: string | null;
    attempt: number | null;
    models: string | null;
    cap_nano_usd: string | number | null;
    exempt: boolean | null;
  }>(
    "SELECT run_name, revoked_at, kind, cell_id, attempt, models, cap_nano_usd, exempt FROM virtual_keys WHERE key_hash = $1",
    [keyHash],
  );
  const row = r.rows[0];
  if (!row || row.revoked_at !== null) return undefined;
  const kind: KeyKind = row.kind === "attempt" || row.kind === "judge" ? row.kind : "run";
  let models: string[] | null = null;
  if (row.models !== null) {
    const parsed: unknown = JSON.parse(row.models);
    models = Array.isArray(parsed) ? parsed.filter((m): m is string => typeof m === "string") : [];
  }
  return {
    keyHash,
    run: row.run_name,
    kind,
    cellId: row.cell_id,
    attempt: row.attempt === null ? null : Number(row.attempt),
    models,
    capNanoUsd: row.cap_nano_usd === null ? null : Number(row.cap_nano_usd),
    exempt: row.exempt === true,
  };
}

/** The run a presented key belongs to, or undefined for an unknown, malformed or revoked key (never which). */
export async function runForKey(db: Db, presented: string): Promise<string | undefined> {
  return (await keyInfo(db, presented))?.run;
}
