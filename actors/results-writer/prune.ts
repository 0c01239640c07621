/**
 * Pruning finished runs from NATS. Nothing in the plane expires by age (protocol/topology.ts): a run's messages,
 * keys and blobs stay until it is finished — every cell ended, every score in — and has been for the retention
 * time; then they go, and its durable rows stay in PostgreSQL, where report, compare and resume read them. A run
 * resubmitted later is planned from PostgreSQL: its budget from the billable spend there, its cells' attempt
 * numbers after the highest there (CellWork.firstAttempt).
 */
import type { Logger } from "../../lib/log.js";
import type { Plane } from "../../plane/connect.js";
import { TypedKv } from "../../plane/kv.js";
import { pruneRunState } from "../../plane/prune.js";
import { RunConfigSchema } from "../../protocol/config.js";
import { RunProgressSchema } from "../../protocol/messages.js";
import { ProgressKeys, StateKeys } from "../../protocol/subjects.js";
import type { Db } from "../../store/db.js";
import { getRunActivity } from "../../store/results.js";

/** A run's live phase when it may be pruned (rejected runs have no other state, but their keys go too). */
const DONE = new Set(["finished", "cancelled", "rejected"]);

export interface PruneContext {
  plane: Plane;
  db: Db;
  log: Logger;
}

/** Why a run stays (or `null`: it may go). */
export async function pruneBlocker(
  ctx: PruneContext,
  run: string,
  afterMs: number,
  now = Date.now(),
): Promise<string | null> {
  const progress = await new TypedKv(ctx.plane.kv.progress, RunProgressSchema, "run progress")
    .get(ProgressKeys.run(run))
    .catch(() => null);
  if (progress && !DONE.has(progress.value.phase)) return `the run is ${progress.value.phase}`;
  const a = await getRunActivity(ctx.db, run);
  if (a.open > 0) return `${a.open} cells are still open`;
  if (a.awaitingScore > 0) return `${a.awaitingScore} attempts still await a grade or verdict`;
  const ended = Math.max(
    a.lastCompletedAt ? Date.parse(a.lastCompletedAt) : 0,
    progress ? Date.parse(progress.value.updatedAt) : 0,
  );
  if (now - ended < afterMs) return `finished ${Math.round((now - ended) / 60_000)} min ago`;
  return null;
}

/**
 * Prune every run whose NATS state may go (see pruneBlocker). Runs are found by their config in the `jobs` bucket,
 * which every planned run has until it is pruned. Returns the runs pruned.
 */
export async function pruneFinishedRuns(
  ctx: PruneContext,
  afterMs: number,
  now = Date.now(),
): Promise<string[]> {
  const configs = new TypedKv(ctx.plane.kv.jobs, RunConfigSchema, "run config");
  const keys: string[] = [];
  for await (const k of await ctx.plane.kv.jobs.keys(StateKeys.allJobRuns)) keys.push(k);
  const pruned: string[] = [];
  for (const key of keys) {
    const run = (await configs.get(key).catch(() => null))?.value.name;
    if (!run) continue;
    const blocker = await pruneBlocker(ctx, run, afterMs, now);
    if (blocker) continue;
    const n = await pruneRunState(ctx.plane, run);
    ctx.log.info({ run, ...n }, "pruned a finished run's NATS state (its rows stay in PostgreSQL)");
    pruned.push(run);
  }
  return pruned;
}
