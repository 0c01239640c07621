import type { Logger } from "../../lib/log.js";
import type { Plane } from "../../plane/connect.js";
import type { AccountSigner } from "../../plane/nats-auth.js";
import { MsgIds } from "../../protocol/ids.js";
import {
  AttemptResultSchema,
  CellWorkSchema,
  type Control,
  MessageTypes,
  type RunEvent,
} from "../../protocol/messages.js";
import { Subjects } from "../../protocol/subjects.js";
import { Consumers } from "../../protocol/topology.js";
import type { Db } from "../../store/db.js";
import { liveBillableByCell } from "../../store/ledger.js";
import { getRunMetadata } from "../../store/results.js";
import { Actor } from "../runtime/actor.js";
import type { LaunchBackend } from "./backends/types.js";
import { BudgetBook } from "./book.js";
import { Claims } from "./claims.js";
import { ControlBoard } from "./control.js";
import { Dispatcher } from "./dispatcher.js";
import { livenessCheck, reapOnce } from "./reaper.js";
import { RunCache } from "./runs.js";

export interface DispatcherOptions {
  plane: Plane;
  db: Db;
  log: Logger;
  backend: LaunchBackend;
  /** cell messages handled at once per replica (each waits for capacity while held) */
  cellConcurrency?: number;
  /** attempt results handled at once per replica (a retry holds its result through the backoff) */
  resultConcurrency?: number;
  /** the seed's 2 s / 4 s / 8 s unless overridden (tests) */
  retryDelaysMs?: readonly number[];
  /** how often this replica looks at its tasks (local: process exits) */
  observeMs?: number;
  exitGraceMs?: number;
  /** the grace after a clean exit (default 60 s: the task's result was acked before it exited) */
  cleanExitGraceMs?: number;
  staleClaimMs?: number;
  /** how often to look for attempts orphaned by a dead replica */
  reapMs?: number;
  /** how often the live budget is trued up to the ledger (default 5 s) */
  ledgerMs?: number;
  capacityPollMs?: number;
  /** the NATS account's signing key: each attempt's task gets a NATS user of its own (plane/nats-auth.ts) */
  natsSigner?: AccountSigner;
  /** close the backend when the actor stops (default true) */
  closeBackend?: boolean;
  id?: string;
}

/**
 * The dispatcher actor: takes cell work as capacity allows, reserves budget (KV, compare-and-set), claims and
 * launches each attempt through a LaunchBackend with a job reference only, and consumes attempt results to
 * reconcile and retry. Any number of replicas may run; drain / cancel / resume arrive over NATS.
 */
export async function startDispatcher(opts: DispatcherOptions): Promise<Actor> {
  const { plane, db, backend } = opts;
  const actor = new Actor("dispatcher", plane, opts.log, opts.id ? { id: opts.id } : {});
  const log = opts.log.child({ actor: "dispatcher", id: actor.id });
  const runs = new RunCache(plane.kv.jobs, plane.kv.progress, db);
  const alive = livenessCheck(plane.kv.progress);
  const book = new BudgetBook(plane.kv.budgets, (run) => runs.seed(run), log);
  const claims = new Claims(plane.kv.budgets);
  let control: ControlBoard | undefined;
  const staleClaimMs = opts.staleClaimMs ?? 30_000;
  const dispatcher = new Dispatcher({
    plane,
    db,
    log,
    backend,
    book,
    claims,
    runs,
    control: () => control!,
    id: actor.id,
    alive,
    publishEvent: (ev) => actor.publishEvent(ev),
    ...(opts.retryDelaysMs ? { retryDelaysMs: opts.retryDelaysMs } : {}),
    ...(opts.natsSigner ? { natsSigner: opts.natsSigner } : {}),
    staleClaimMs,
    capacityPollMs: opts.capacityPollMs ?? 250,
    exitGraceMs: opts.exitGraceMs ?? 1_500,
    cleanExitGraceMs: opts.cleanExitGraceMs ?? 60_000,
  });
  control = new ControlBoard(
    plane.nc,
    plane.kv.control,
    log,
    actor.id,
    (run, state) => {
      log.info({ run, state }, "run control changed");
      if (state === "cancelled")
        dispatcher
          .cancelRun(run)
          .catch((err: unknown) => log.error({ err: String(err), run }, "cancel failed"));
    },
    (run) => dispatcher.runningOf(run),
    (req) => resubmit(plane, db, req),
    async (req, reply) => {
      if (req.verb === "resume") return; // the planner announces the resumed run
      const event: RunEvent = {
        type: MessageTypes.runEvent,
        run: req.run,
        kind: req.verb === "drain" ? "drained" : "cancelled",
        at: new Date().toISOString(),
        message: `${reply.message.replace(/ \d+ running attempt\(s\) here/, " running attempts")} (by ${req.requestedBy})`,
      };
      await plane.js.publish(Subjects.events.run(req.run), JSON.stringify(event), {
        msgID: MsgIds.controlEvent(req.run, req.verb, req.at),
      });
    },
  );
  await control.start();
  const runWatch = await runs.watch();
  await actor.start();
  await actor.consume({
    def: Consumers.dispatcherAttempts,
    schema: AttemptResultSchema,
    what: "attempt result",
    subjectOf: (r) => Subjects.attempts.one(r.run, r.cellId, r.attempt),
    concurrency: opts.resultConcurrency ?? 256,
    handle: (d) => dispatcher.handleResult(d),
  });
  await actor.consume({
    def: Consumers.dispatcher,
    schema: CellWorkSchema,
    what: "cell work",
    concurrency: opts.cellConcurrency ?? 512,
    handle: (d) => dispatcher.handleCell(d),
    onPoison: (raw, _subject, err) => dispatcher.cellPoisoned(raw, err),
  });
  const observer = setInterval(() => {
    dispatcher
      .observeOnce(actor.signal)
      .catch((err: unknown) => log.warn({ err: String(err) }, "observing tasks failed"));
  }, opts.observeMs ?? 500);
  observer.unref();
  let reaping = false;
  const reaper = setInterval(() => {
    if (reaping) return;
    reaping = true;
    reapOnce(
      {
        plane,
        book,
        claims,
        dispatcher,
        backend,
        control: () => control!,
        alive,
        selfId: actor.id,
        staleClaimMs,
        log,
      },
      actor.signal,
    )
      .catch((err: unknown) => log.warn({ err: String(err) }, "looking for orphaned attempts failed"))
      .finally(() => {
        reaping = false;
      });
  }, opts.reapMs ?? 15_000);
  reaper.unref();
  // The live budget follows the ledger: spend no attempt reported (the judge's calls, a dead task's, the gateway's
  // settled ones) reduces what is left for the cells still to admit.
  let following = false;
  const follower = setInterval(() => {
    if (following) return;
    following = true;
    book
      .followLedgers((run) => liveBillableByCell(db, run))
      .catch((err: unknown) => log.warn({ err: String(err) }, "following the ledger failed"))
      .finally(() => {
        following = false;
      });
  }, opts.ledgerMs ?? 5_000);
  follower.unref();
  void actor.stopped.then(async () => {
    clearInterval(observer);
    clearInterval(reaper);
    clearInterval(follower);
    runWatch.stop();
    await control?.stop();
    if (opts.closeBackend !== false) await backend.close().catch(() => {});
  });
  return actor;
}

/**
 * Resume: submit the run's stored config (run_metadata) again, so the planner requeues its incomplete cells. Every
 * replica answering the same request publishes with one message id, so JetStream keeps one submission.
 */
async function resubmit(plane: Plane, db: Db, req: Control): Promise<string | null> {
  const meta = await getRunMetadata(db, req.run);
  if (!meta) return `no run named ${req.run} in the results database`;
  await plane.js.publish(Subjects.runSubmit, meta.configJson, { msgID: MsgIds.resume(req.run, req.at) });
  return null;
}
