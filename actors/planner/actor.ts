import type { JsMsg } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { z } from "zod";
import type { Logger } from "../../lib/log.js";
import type { PacerPools } from "../../pacer/local.js";
import type { Plane } from "../../plane/connect.js";
import type { RunConfig } from "../../protocol/config.js";
import { ErrorCode, EvalfleetError, formatIssues } from "../../protocol/errors.js";
import {
  emptyRunProgress,
  MessageTypes,
  type RunProgress,
  RunProgressSchema,
} from "../../protocol/messages.js";
import { nanoToNumber, usdToNano } from "../../protocol/money.js";
import { ProgressKeys, Subjects } from "../../protocol/subjects.js";
import { Consumers } from "../../protocol/topology.js";
import { VERSION } from "../../protocol/version.js";
import type { Db } from "../../store/db.js";
import { getTaskValidations } from "../../store/grades.js";
import {
  getCompletedCells,
  getRunMetadata,
  getSeedCounts,
  insertPendingCells,
  latestKnownAttempts,
  saveRunMetadata,
} from "../../store/results.js";
import { Actor } from "../runtime/actor.js";
import { type PoolFleet, poolsField, putPoolKeys, sizeRunPool, startFleetResizer } from "./fleet.js";
import { type Plan, parseSubmission, planRun, Rejection } from "./plan.js";
import { cellWorkOf, publishCells, putRunProgress, writeJobs } from "./publish.js";
import { RESUME_MAY_CHANGE, resumeConflicts } from "./resume.js";

export interface PlannerOptions {
  plane: Plane;
  db: Db;
  log: Logger;
  /** Folders task libraries may be read from; a relative task_library_path is looked up under each in order. */
  libraryRoots: readonly string[];
  /** Called after a run is planned (the gateway makes the run's key here). */
  onPlanned?: (plan: Plan) => Promise<void>;
  /** Re-size the open runs' pools this often (default 15 s; see fleet.ts). */
  fleetIntervalMs?: number;
  /** Configured pool limits, for pools the pacer has no limits for yet. */
  fleetPools?: PacerPools;
}

/** What the planner did with one submission. */
export type PlanOutcome =
  | { kind: "planned"; run: string; totalCells: number; published: number; skipped: number; resumed: boolean }
  | { kind: "rejected"; run: string | undefined; message: string };

/**
 * The planner: takes run submissions from the RUNS stream (a plain `nats pub runs.submit` lands there), validates,
 * expands the matrix, persists the run and one run_state row per cell, hands each incomplete cell to the dispatcher,
 * and tells the user what happened on the run's events subject and its `run.<name>` progress key.
 */
export async function startPlanner(opts: PlannerOptions): Promise<Actor> {
  const actor = new Actor("planner", opts.plane, opts.log);
  await actor.start();
  startFleetResizer({
    plane: opts.plane,
    db: opts.db,
    log: opts.log,
    signal: actor.signal,
    intervalMs: opts.fleetIntervalMs,
    pools: opts.fleetPools,
  });
  await actor.consume({
    def: Consumers.planner,
    schema: z.custom<{ seq: number; data: Uint8Array }>(),
    what: "run submission",
    // Parsing happens inside the handler so a bad submission becomes a visible rejection, not a poison message.
    decode: (data: Uint8Array, msg: JsMsg) => ({ seq: msg.info.streamSequence, data }),
    handle: async (d) => {
      await handleSubmission(opts, actor, d.value.data, d.value.seq);
    },
  });
  return actor;
}

/** Plan one submission; never throws for bad input (that is a rejection), only for infrastructure failures. */
export async function handleSubmission(
  opts: PlannerOptions,
  actor: Actor,
  data: Uint8Array,
  seq: number,
): Promise<PlanOutcome> {
  const log = opts.log.child({ submission: seq });
  let plan: Plan;
  try {
    const config = parseSubmission(data);
    plan = await planRun(config, opts.libraryRoots, (ids) => getTaskValidations(opts.db, ids));
    await assertSameRun(opts.db, plan.config);
  } catch (err) {
    if (!(err instanceof Rejection)) throw err;
    await reject(opts, actor, err, seq);
    log.info({ run: err.runName, issues: err.issues.length }, "run rejected");
    return { kind: "rejected", run: err.runName, message: err.message };
  }
  return await persistAndPublish(opts, actor, plan, seq);
}

/**
 * A resubmission of an existing run's name resumes that run, so its config must be the stored one (budget and
 * concurrency aside); anything else is refused with every difference, and how to get either outcome.
 */
async function assertSameRun(db: Db, config: RunConfig): Promise<void> {
  const previous = await getRunMetadata(db, config.name);
  if (!previous) return;
  const conflicts = resumeConflicts(JSON.parse(previous.configJson) as RunConfig, config);
  if (conflicts.length === 0) return;
  const may = [...RESUME_MAY_CHANGE].join(" and ");
  throw new Rejection(
    config.name,
    `run ${config.name} already exists with a different config (${conflicts.length} difference${conflicts.length === 1 ? "" : "s"}, listed below). ` +
      `Submitting its name again resumes that run, which may change only ${may}. To resume it, submit its stored ` +
      `config (\`evalfleet resume ${config.name}\`); to run this config, give it a new name (\`name:\` in the run ` +
      "file, or `evalfleet submit FILE --name NEW`).",
    conflicts,
    ErrorCode.Conflict,
  );
}

async function reject(opts: PlannerOptions, actor: Actor, err: Rejection, seq: number): Promise<void> {
  const run = err.runName;
  const message = `run rejected: ${err.message}`;
  if (run === undefined) {
    await opts.plane.kv.progress.put(
      ProgressKeys.rejected(seq),
      JSON.stringify({
        type: MessageTypes.runProgress,
        phase: "rejected",
        message,
        issues: err.issues,
        at: new Date().toISOString(),
      }),
    );
    await opts.plane.js.publish(
      Subjects.events.rejected,
      JSON.stringify({ message, issues: err.issues, seq }),
    );
    return;
  }
  await actor.publishEvent({ run, kind: "rejected", message, issues: err.issues });
  // A rejected resubmission must not overwrite a live run's progress; its event is enough.
  const existing = await getRunMetadata(opts.db, run);
  if (existing) return;
  await putRunProgress(
    opts.plane.kv.progress,
    emptyRunProgress({
      run,
      phase: "rejected",
      message: `${message}\n${formatIssues(err.issues)}`,
      issues: err.issues,
    }),
  );
}

async function persistAndPublish(
  opts: PlannerOptions,
  actor: Actor,
  plan: Plan,
  seq: number,
): Promise<PlanOutcome> {
  const { config, cells } = plan;
  const run = config.name;
  const log = opts.log.child({ run });
  const previous = await getRunMetadata(opts.db, run);
  // The same submission again (the planner died after planning it, before its ack): plan it as what it was. Cells it
  // completed since are not an earlier submission's, and a new run is not a resume of itself.
  const prior = await readRunProgress(opts.plane.kv.progress, run);
  const redelivered = prior?.submissionSeq === seq;
  const resumed = redelivered ? prior.resumed === true : previous !== null;
  await opts.db.transaction(async (tx) => {
    await saveRunMetadata(tx, {
      runName: run,
      config,
      version: VERSION,
      dockerImage: config.docker_image ?? null,
    });
    await insertPendingCells(tx, run, cells);
  });
  const completed = await getCompletedCells(opts.db, run);
  // The seed counts cells an earlier submission completed as skipped; the progress writer keeps them apart.
  const alreadyPassed = completed.size === 0 ? 0 : (await getSeedCounts(opts.db, run)).pass;
  // A resumed cell starts after every attempt the database knows: its NATS state may have been pruned since.
  const known = previous ? await latestKnownAttempts(opts.db, run) : new Map<string, number>();
  const alreadyCompleted = redelivered ? (prior.alreadyCompleted ?? 0) : completed.size;
  const alreadyPassedCount = redelivered
    ? (prior.alreadyPassed ?? 0)
    : Math.min(alreadyPassed, completed.size);
  const work = cells
    .filter((c) => !completed.has(c.cellId))
    .map((c) =>
      cellWorkOf(run, c, {
        timeoutPolicy: config.timeout_policy,
        firstAttempt: (known.get(c.cellId) ?? -1) + 1,
      }),
    );
  await writeJobs(opts.plane.kv.jobs, config, plan.tasks, work);
  await opts.onPlanned?.(plan);
  const fleet: Record<string, PoolFleet> = {};
  const ctx = { db: opts.db, pacer: opts.plane.kv.pacer, pools: opts.fleetPools };
  for (const pool of new Set(cells.map((c) => c.pool)))
    fleet[pool] = await sizeRunPool(ctx, run, pool, work.filter((w) => w.pool === pool).length);
  const pools = poolsField(fleet);
  const progress = emptyRunProgress({
    run,
    phase: work.length === 0 ? "finished" : "planned",
    message:
      work.length === 0
        ? `all ${cells.length} cells already completed`
        : `${resumed ? "resumed" : "planned"}: ${work.length} of ${cells.length} cells queued${completed.size ? `, ${completed.size} already completed` : ""}${
            plan.unvalidated.length > 0
              ? `; UNVALIDATED (--unvalidated): ${plan.unvalidated.length} task(s) not gold-validated: ${plan.unvalidated.map((i) => i.path.replace(/^tasks: /, "")).join(", ")}`
              : ""
          }`,
    totalCells: cells.length,
    completed: completed.size,
    pending: work.length,
    seed: { completed: 0, failed: 0, skipped: alreadyCompleted },
    alreadyCompleted,
    alreadyPassed: alreadyPassedCount,
    submissionSeq: seq,
    resumed,
    budgetNanoUsd: config.budget_usd === undefined ? null : nanoToNumber(usdToNano(config.budget_usd)),
    ...(Object.keys(pools).length > 0 ? { pools } : {}),
  });
  await putRunProgress(opts.plane.kv.progress, progress);
  await putPoolKeys(opts.plane.kv.progress, run, fleet);
  const published = await publishCells(opts.plane.js, work, seq);
  await actor.publishEvent({
    run,
    kind: resumed ? "resumed" : "accepted",
    message: progress.message,
    data: {
      totalCells: cells.length,
      queued: work.length,
      completed: completed.size,
      tasks: plan.tasks.length,
      ...(plan.unvalidated.length > 0 ? { unvalidated: plan.unvalidated } : {}),
    },
  });
  log.info({ totalCells: cells.length, queued: work.length }, resumed ? "run resumed" : "run planned");
  return {
    kind: "planned",
    run,
    totalCells: cells.length,
    published,
    skipped: completed.size,
    resumed,
  };
}

/** The run's progress key as the planner last left it, or null (none, or unreadable: then nothing is reused). */
async function readRunProgress(kv: KV, run: string): Promise<RunProgress | null> {
  const e = await kv.get(ProgressKeys.run(run)).catch(() => null);
  if (!e || e.length === 0) return null;
  const parsed = RunProgressSchema.safeParse(e.json());
  return parsed.success ? parsed.data : null;
}

/** Thrown by `evalfleet submit` when the planner does not answer in time. */
export function plannerTimeout(run: string, ms: number): EvalfleetError {
  return new EvalfleetError(
    ErrorCode.Timeout,
    `no verdict for run ${run} after ${ms} ms: is the planner running? Start it with \`evalfleet up\` or \`evalfleet actor planner\`.`,
  );
}
