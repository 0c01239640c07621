import type { z } from "zod";
import type { Logger } from "../../lib/log.js";
import type { Plane } from "../../plane/connect.js";
import { type EvalfleetError, toEvalfleetError } from "../../protocol/errors.js";
import {
  AttemptResultSchema,
  GradeResultSchema,
  LedgerCallSchema,
  VerdictSchema,
} from "../../protocol/messages.js";
import { Subjects } from "../../protocol/subjects.js";
import { type ConsumerDef, Consumers } from "../../protocol/topology.js";
import type { Db } from "../../store/db.js";
import { runsWithTruedCalls, settleOrphans } from "../../store/spend.js";
import { Actor, type Delivery } from "../runtime/actor.js";
import { ClaimedAttempts } from "../runtime/security.js";
import { landAttempts } from "./attempts.js";
import { CellRecords } from "./cells.js";
import type { Feed, WriterContext } from "./context.js";
import { landLedger } from "./ledger.js";
import { ProgressWriter } from "./progress.js";
import { pruneFinishedRuns } from "./prune.js";
import { landGrades, landVerdicts } from "./scores.js";

export interface ResultsWriterOptions {
  plane: Plane;
  db: Db;
  log: Logger;
  /** Messages per batch (one transaction each) and how long a partial batch waits. */
  batchSize?: number;
  batchWaitMs?: number;
  /** Concurrent batches per high-volume feed (attempts, ledger); default 1 (more helps only with spare database cores). */
  pipelines?: number;
  /** Each run's progress key is written at most once per this interval. */
  progressIntervalMs?: number;
  /** `finished` waits for enqueued grades and verdicts (default true). */
  waitForScores?: boolean;
  /** Test seam: called after each batch's commit, before its publishes (crash injection). */
  afterCommit?: (feed: Feed) => Promise<void> | void;
  /** The results-writer role's settings: how long a finished run's NATS state stays (`retention.pruneAfterMs`). */
  settings?: { retention?: { pruneAfterMs: number | null } };
  /** how often finished runs are looked for (default 10 minutes) */
  pruneEveryMs?: number;
  /** how often pending spend-log rows of dead gateway replicas are looked for (default 30 s) */
  orphanSweepMs?: number;
}

/** Deliveries of a message that keeps failing for a non-retryable reason before it is dropped with an event. */
const MAX_DELIVERIES = 5;

/**
 * The results-writer: the one writer of attempt, phase and ledger rows. Four durable consumers (attempt results,
 * ledger calls, grade results, verdicts), each landing batches in one transaction and acking after the commit;
 * every write is idempotent, so redelivery after a crash changes nothing. Live progress goes to KV, coalesced.
 * Replicas share the consumers.
 */
export async function startResultsWriter(opts: ResultsWriterOptions): Promise<Actor> {
  const actor = new Actor("results-writer", opts.plane, opts.log);
  const progress = new ProgressWriter({
    kv: opts.plane.kv.progress,
    jobs: opts.plane.kv.jobs,
    jsm: opts.plane.jsm,
    db: opts.db,
    log: opts.log,
    actor,
    ...(opts.progressIntervalMs ? { intervalMs: opts.progressIntervalMs } : {}),
    ...(opts.waitForScores === undefined ? {} : { waitForScores: opts.waitForScores }),
  });
  const ctx: WriterContext = {
    plane: opts.plane,
    db: opts.db,
    log: opts.log,
    cells: new CellRecords(opts.plane.kv.jobs, opts.log),
    progress,
    claims: new ClaimedAttempts(opts.plane.kv.budgets),
    actor,
    ...(opts.afterCommit ? { afterCommit: opts.afterCommit } : {}),
  };
  await actor.start();
  progress.start();
  await progress.adoptOpenRuns().catch((err) => opts.log.warn({ err }, "could not list unfinished runs"));
  void actor.stopped.then(() => progress.stop());

  const feed = async <S extends z.ZodType>(
    def: ConsumerDef,
    schema: S,
    what: string,
    land: (items: z.output<S>[]) => Promise<unknown>,
    subjectOf?: (value: z.output<S>) => string,
  ) => {
    await actor.consume({
      def,
      schema,
      what,
      ...(subjectOf ? { subjectOf } : {}),
      batchSize: opts.batchSize ?? 500,
      batchWaitMs: opts.batchWaitMs ?? 20,
      handleBatch: isolating(actor, what, land),
      onPoison: (raw, subject, err) => poisonEvent(actor, what, raw, subject, err),
    });
  };
  // The two high-volume feeds can pull with several subscriptions, so one batch commits while the next is being
  // read and prepared; per-cell locks keep concurrent batches correct.
  for (let i = 0; i < (opts.pipelines ?? 1); i++) {
    await feed(
      Consumers.resultsWriterAttempts,
      AttemptResultSchema,
      "attempt result",
      (b) => landAttempts(ctx, b),
      (r) => Subjects.attempts.one(r.run, r.cellId, r.attempt),
    );
    await feed(
      Consumers.resultsWriterLedger,
      LedgerCallSchema,
      "ledger call",
      (b) => landLedger(ctx, b),
      (c) => Subjects.ledger.one(c.run, c.cellId, c.attempt),
    );
  }
  await feed(Consumers.resultsWriterGrades, GradeResultSchema, "grade result", (b) => landGrades(ctx, b));
  await feed(Consumers.resultsWriterVerdicts, VerdictSchema, "verdict", (b) => landVerdicts(ctx, b));
  // Calls a killed gateway replica held: settled at their reservation once it is known dead, and at the provider's
  // figures once the gateway has trued them up to its usage report, into their runs' ledger.
  actor.every("settling calls of dead gateway replicas", opts.orphanSweepMs ?? 30_000, async () => {
    for (const run of await settleOrphans(opts.db)) progress.markDirty(run);
    for (const run of await runsWithTruedCalls(opts.db)) progress.markDirty(run);
  });
  // Default a week; null (EVALFLEET_PRUNE_AFTER_HOURS=0) keeps every run's NATS state for ever.
  const pruneAfterMs = opts.settings?.retention ? opts.settings.retention.pruneAfterMs : 7 * 24 * 3_600_000;
  if (pruneAfterMs !== null)
    actor.every("pruning finished runs", opts.pruneEveryMs ?? 10 * 60_000, async () => {
      await pruneFinishedRuns({ plane: opts.plane, db: opts.db, log: opts.log }, pruneAfterMs);
    });
  return actor;
}

/**
 * One bad message must not hold its batch hostage. When a batch fails for a non-retryable reason, its messages
 * are landed one by one; the failure is rethrown so the batch is redelivered (the landed ones are no-ops then),
 * and a message still failing after MAX_DELIVERIES is dropped with a poison event instead of taking its
 * batch-mates down with it. Retryable failures (database or NATS unavailable) retry the whole batch.
 */
function isolating<T>(
  actor: Actor,
  what: string,
  land: (items: T[]) => Promise<unknown>,
): (batch: Delivery<T>[]) => Promise<void> {
  return async (batch) => {
    try {
      await land(batch.map((d) => d.value));
      return;
    } catch (err) {
      if (toEvalfleetError(err).retryable) throw err;
    }
    let retry: unknown;
    for (const d of batch) {
      try {
        await land([d.value]);
      } catch (err) {
        const e = toEvalfleetError(err);
        if (e.retryable || d.deliveryCount < MAX_DELIVERIES) {
          retry ??= err;
          continue;
        }
        actor.log.error({ subject: d.subject, err: e.message }, `dropping ${what} that keeps failing`);
        await poisonEvent(actor, what, new TextEncoder().encode(JSON.stringify(d.value)), d.subject, e);
      }
    }
    if (retry !== undefined) throw retry;
  };
}

async function poisonEvent(
  actor: Actor,
  what: string,
  raw: Uint8Array,
  subject: string,
  err: EvalfleetError,
): Promise<void> {
  let run: unknown;
  try {
    run = (JSON.parse(new TextDecoder().decode(raw)) as { run?: unknown }).run;
  } catch {
    run = undefined;
  }
  if (typeof run !== "string") return;
  await actor
    .publishEvent({
      run,
      kind: "poison",
      message: `results-writer dropped a ${what} on ${subject}: ${err.message}`,
      issues: err.issues,
    })
    .catch((e) => actor.log.error({ err: e }, "poison event failed"));
}
