import type { JetStreamClient } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import type { RunConfig, TaskSpec, TimeoutPolicy } from "../../protocol/config.js";
import { MsgIds } from "../../protocol/ids.js";
import { type CellWork, MessageTypes, type RunProgress } from "../../protocol/messages.js";
import { ProgressKeys, StateKeys, Subjects } from "../../protocol/subjects.js";
import type { Cell } from "./matrix.js";

/** How many publishes may be awaiting their ack at once: pipelining is 3-4× faster than awaiting each. */
const WINDOW = 2_000;

export function cellWorkOf(
  run: string,
  cell: Cell,
  opts: { timeoutPolicy?: TimeoutPolicy; firstAttempt?: number } = {},
): CellWork {
  return {
    ...(opts.firstAttempt ? { firstAttempt: opts.firstAttempt } : {}),
    type: MessageTypes.cellWork,
    run,
    cellId: cell.cellId,
    pool: cell.pool,
    harness: cell.harness.name,
    model: cell.model.name,
    reviewModel: cell.reviewModel?.name ?? null,
    taskId: cell.task.id,
    track: cell.task.track,
    repeat: cell.repeat,
    traceId: cell.traceId,
    exempt: cell.exempt,
    costMode: cell.model.cost_mode,
    ...(opts.timeoutPolicy ? { timeoutPolicy: opts.timeoutPolicy } : {}),
  };
}

/**
 * Write what tasks fetch by reference: the run's config once, each task spec once, and each cell's work record.
 * Keys are per run so two runs never share a job.
 */
export async function writeJobs(
  jobs: KV,
  config: RunConfig,
  tasks: readonly TaskSpec[],
  work: readonly CellWork[],
): Promise<void> {
  const pending: Promise<unknown>[] = [jobs.put(StateKeys.jobRun(config.name), JSON.stringify(config))];
  for (const t of tasks) pending.push(jobs.put(StateKeys.jobTask(config.name, t.id), JSON.stringify(t)));
  for (const w of work) {
    pending.push(jobs.put(StateKeys.job(config.name, w.cellId), JSON.stringify(w)));
    if (pending.length >= WINDOW) await Promise.all(pending.splice(0));
  }
  await Promise.all(pending);
}

/**
 * Publish one cell-work message per cell. The message id is run + cell + the submission's stream sequence: a
 * redelivered submission (planner crashed before its ack) republishes the same ids and JetStream drops them, while
 * a later resubmission (a resume) gets new ids and re-queues the cells that are still incomplete.
 */
export async function publishCells(
  js: JetStreamClient,
  work: readonly CellWork[],
  generation: number,
): Promise<number> {
  let pending: Promise<unknown>[] = [];
  let published = 0;
  for (const w of work) {
    pending.push(
      js.publish(Subjects.cells.one(w.run, w.pool), JSON.stringify(w), {
        msgID: MsgIds.cellWork(w.run, w.cellId, generation),
      }),
    );
    published++;
    if (pending.length >= WINDOW) {
      await Promise.all(pending);
      pending = [];
    }
  }
  await Promise.all(pending);
  return published;
}

export async function putRunProgress(progress: KV, p: RunProgress): Promise<void> {
  await progress.put(ProgressKeys.run(p.run), JSON.stringify(p));
}
