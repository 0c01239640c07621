/**
 * The gateway key of each attempt (issue 14.4): minted when the dispatcher launches the attempt, capped at the run's
 * `max_cost_usd`, bound to its cell and the cell's model(s) and exemption, handed to the task through the jobs bucket
 * (`key.<run>.<cell>.<attempt>`, which only that attempt's NATS user may read), revoked when the attempt ends and
 * purged from the bucket with the run's other keys when the run does. The gateway enforces the cap and the binding itself, so they hold even if the shim is subverted.
 */
import type { KV } from "@nats-io/kv";
import type { RunConfig } from "../../protocol/config.js";
import { type CellWork, CellWorkSchema } from "../../protocol/messages.js";
import { nanoToNumber, usdToNano } from "../../protocol/money.js";
import { StateKeys } from "../../protocol/subjects.js";
import { wireModelId } from "../../providers/run-prices.js";
import type { Db } from "../../store/db.js";
import { createAttemptKey, revokeAttemptKeys } from "../../store/keys.js";

export interface AttemptKeyRef {
  run: string;
  cellId: string;
  attempt: number;
}

/** The model ids (gateway aliases) a cell's calls may use: its model and, for a review phase, its review model. */
export function cellModels(config: RunConfig, work: CellWork): string[] {
  const ids = new Set<string>();
  for (const name of [work.model, work.reviewModel]) {
    if (!name) continue;
    const m = config.models.find((x) => x.name === name);
    ids.add(m ? wireModelId(m) : name);
  }
  return [...ids];
}

/**
 * Mint the attempt's key unless the jobs bucket already holds one (a relaunch of the same attempt by a replica that
 * took it over). Returns false when the cell's work is not in the bucket (nothing to bind the key to).
 */
export async function mintAttemptKey(
  db: Db,
  jobs: KV,
  config: RunConfig,
  ref: AttemptKeyRef,
): Promise<boolean> {
  const k = StateKeys.attemptKey(ref.run, ref.cellId, ref.attempt);
  const existing = await jobs.get(k);
  if (existing?.operation === "PUT" && existing.length > 0) return true;
  const e = await jobs.get(StateKeys.job(ref.run, ref.cellId));
  if (e?.operation !== "PUT" || e.length === 0) return false;
  const parsed = CellWorkSchema.safeParse(e.json());
  if (!parsed.success) return false;
  const work = parsed.data;
  const plaintext = await createAttemptKey(db, {
    run: ref.run,
    cellId: ref.cellId,
    attempt: ref.attempt,
    models: cellModels(config, work),
    capNanoUsd: config.max_cost_usd === undefined ? null : nanoToNumber(usdToNano(config.max_cost_usd)),
    exempt: work.exempt,
  });
  await jobs.put(k, plaintext);
  return true;
}

/**
 * The attempt ended: its key stops working at the gateway. Idempotent. Its plaintext stays in the jobs bucket, worthless
 * (revoked) and readable only by the attempt's own NATS user, which expired with it, until the run ends: then the
 * run's attempt keys leave the bucket in one purge (`purgeAttemptKeys`), not one delete message per attempt.
 */
export async function endAttemptKey(db: Db, ref: AttemptKeyRef): Promise<void> {
  await revokeAttemptKeys(db, ref.run, ref.cellId, ref.attempt);
}
