/**
 * Removing one run's state from NATS: its messages from every stream, its keys from every bucket (with their delete
 * markers: a purge of the bucket's stream by subject leaves nothing behind) and its blobs. Idempotent: a second
 * prune of the same run finds nothing and removes nothing. Which runs, and when, is the results-writer's decision
 * (actors/results-writer/prune.ts); the run's durable rows stay in PostgreSQL.
 */
import type { JetStreamManager } from "@nats-io/jetstream";
import { StateKeys } from "../protocol/subjects.js";
import { Buckets, runFootprint } from "../protocol/topology.js";
import type { Plane } from "./connect.js";

export interface PruneCount {
  /** stream messages and KV entries removed */
  messages: number;
  blobs: number;
}

export async function pruneRunState(plane: Plane, run: string): Promise<PruneCount> {
  const fp = runFootprint(run);
  let messages = 0;
  for (const s of fp.streams)
    messages += (await plane.jsm.streams.purge(s.stream, { filter: s.filter })).purged;
  for (const k of fp.keys) {
    const r = await plane.jsm.streams.purge(`KV_${k.bucket}`, { filter: `$KV.${k.bucket}.${k.filter}` });
    messages += r.purged;
  }
  const names: string[] = [];
  for (const info of await plane.blobs.list()) if (info.name.startsWith(fp.blobPrefix)) names.push(info.name);
  for (const name of names) await plane.blobs.delete(name);
  return { messages, blobs: names.length };
}

/**
 * A run's attempt keys (`key.<run>.>` in the jobs bucket) removed in one purge: each was revoked when its attempt
 * ended, so what is left is worthless plaintext. Returns how many there were. Idempotent.
 */
export async function purgeAttemptKeys(jsm: JetStreamManager, run: string): Promise<number> {
  const bucket = Buckets.jobs.name;
  const r = await jsm.streams.purge(`KV_${bucket}`, {
    filter: `$KV.${bucket}.${StateKeys.attemptKeysOfRun(run)}`,
  });
  return r.purged;
}
