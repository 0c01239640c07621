import type { KV } from "@nats-io/kv";
import type { Logger } from "../../lib/log.js";
import type { Plane } from "../../plane/connect.js";
import { TypedKv } from "../../plane/kv.js";
import { HeartbeatSchema } from "../../protocol/messages.js";
import { classifyAttempt, retriesOf } from "../../protocol/retry.js";
import { BudgetStateSchema } from "../../protocol/state.js";
import { ProgressKeys } from "../../protocol/subjects.js";
import { Consumers } from "../../protocol/topology.js";
import { localTaskAlive } from "./backends/local.js";
import type { LaunchBackend } from "./backends/types.js";
import type { BudgetBook } from "./book.js";
import { submissionOver } from "./budget.js";
import type { Claims } from "./claims.js";
import type { ControlBoard } from "./control.js";
import type { Dispatcher } from "./dispatcher.js";

/** A replica is alive while its heartbeat (every 5 s) is fresh and it has not said it stopped. */
export function livenessCheck(progress: KV, maxAgeMs = 20_000): (id: string) => Promise<boolean> {
  const heartbeats = new TypedKv(progress, HeartbeatSchema, "heartbeat");
  return async (id) => {
    const hb = (await heartbeats.get(ProgressKeys.actor("dispatcher", id)).catch(() => null))?.value;
    if (!hb) return false;
    return hb.state !== "stopped" && hb.state !== "failed" && Date.now() - Date.parse(hb.at) < maxAgeMs;
  };
}

export interface ReaperDeps {
  plane: Plane;
  book: BudgetBook;
  claims: Claims;
  dispatcher: Dispatcher;
  backend: LaunchBackend;
  control: () => ControlBoard;
  alive: (id: string) => Promise<boolean>;
  selfId: string;
  /** a claim of this replica's own older than this that never launched is launched again (see below) */
  staleClaimMs: number;
  log: Logger;
  /** cells looked at per pass */
  maxCells?: number;
}

/**
 * Attempts orphaned by a dispatcher replica that died: its launched attempt holds a reservation, but nobody watches
 * the task (a sim attempt died with it; a local process may be gone). When the attempt's claimant has no fresh
 * heartbeat and no result is waiting in the stream, the next attempt is launched — an infrastructure retry, never
 * the model's failure. The orphan's own result, should it still come, is then superseded: its cost is reconciled
 * and nothing else. Claims keep two reapers from launching the same attempt.
 */
export async function reapOnce(d: ReaperDeps, signal: AbortSignal): Promise<number> {
  const info = await d.plane.jsm.consumers.info(
    Consumers.dispatcherAttempts.stream,
    Consumers.dispatcherAttempts.durable,
  );
  // Results not yet delivered may be exactly the ones the orphans published: wait for the stream to drain first.
  if (info.num_pending > 0) return 0;
  const runs: string[] = [];
  for await (const k of await d.plane.kv.budgets.keys("run.*")) runs.push(k);
  let looked = 0;
  let reaped = 0;
  const liveness = new Map<string, boolean>();
  const alive = async (id: string) => {
    if (id === d.selfId) return true;
    let v = liveness.get(id);
    if (v === undefined) {
      v = await d.alive(id);
      liveness.set(id, v);
    }
    return v;
  };
  const budgets = new TypedKv(d.plane.kv.budgets, BudgetStateSchema, "budget state");
  for (const k of runs) {
    const state = (await budgets.get(k))?.value;
    if (!state) continue;
    if (d.control().state(state.run) !== "active") continue;
    for (const [cellId, open] of Object.entries(state.open)) {
      if (signal.aborted || ++looked > (d.maxCells ?? 5_000)) return reaped;
      const cell = await d.claims.cell(state.run, cellId);
      // No record yet, or the reservation is a newer submission's that has not launched: its message comes back.
      if (!cell || submissionOver(state, cellId, cell.gen)) continue;
      const c = await d.claims.get(state.run, cellId, cell.latest);
      if (!c) continue;
      // This replica's own claim, stale and never launched: the launch failed after another delivery of the cell
      // message was acked, so nothing else would ever start it. ensureLaunched waits for a launch still under way.
      const ownStuck =
        c.claim.by === d.selfId &&
        !c.claim.launchedAt &&
        Date.now() - Date.parse(c.claim.at) >= d.staleClaimMs;
      if (!ownStuck && (await alive(c.claim.by))) continue;
      if (!c.claim.launchedAt) {
        // Claimed by a replica that died before it recorded a launch. Its cell message may be acked already (or a
        // take-over lost a compare-and-set to a stale read), and then nothing else would ever launch the attempt.
        await d.dispatcher.ensureLaunched(state.run, cellId, cell.latest, signal);
        reaped++;
        continue;
      }
      const handle = c.claim.handle ?? "";
      // The task may outlive its dispatcher (an ECS task, a local process): while it runs, its result will come.
      const seen = handle ? (await d.backend.observe([handle]).catch(() => []))[0] : undefined;
      if (seen && seen.phase !== "stopped") continue;
      if (!seen && localTaskAlive(handle)) continue;
      const ref = { runName: state.run, cellId, attempt: cell.latest, pool: open.p };
      if (seen?.stop && seen.stop.kind !== "retryable") {
        // Stopped without a result we have seen: publish one for it (ignored if its own exists).
        await d.dispatcher.noResult(ref, c.claim.base, seen.stop, signal);
        reaped++;
        continue;
      }
      const cls = classifyAttempt("INFRA_RETRYABLE", retriesOf(cell.latest, c.claim.base));
      d.log.warn(
        { run: state.run, cellId, attempt: cell.latest, owner: c.claim.by, retry: cls.retry },
        "attempt orphaned by a dead dispatcher",
      );
      if (cls.retry)
        await d.dispatcher.launchAttempt(
          state.run,
          cellId,
          open.p,
          cell.latest + 1,
          c.claim.base,
          c.claim.gen,
          signal,
        );
      else await d.dispatcher.giveUp(state.run, cellId, cell.latest, "its dispatcher died");
      reaped++;
    }
  }
  return reaped;
}
