import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "../../lib/log.js";
import { Metrics } from "../../lib/metrics.js";
import type { Plane } from "../../plane/connect.js";
import type { AccountSigner } from "../../plane/nats-auth.js";
import { ErrorCode, type EvalfleetError, RetryableError } from "../../protocol/errors.js";
import {
  type AttemptResult,
  type CellProgress,
  type CellWork,
  CellWorkSchema,
  emptyUsage,
  MessageTypes,
  type RunEvent,
} from "../../protocol/messages.js";
import { classifyAttempt, retriesOf } from "../../protocol/retry.js";
import { ProgressKeys, Subjects } from "../../protocol/subjects.js";
import { Streams } from "../../protocol/topology.js";
import type { Db } from "../../store/db.js";
import { attemptBillableNanoUsd } from "../../store/ledger.js";
import type { Delivery } from "../runtime/actor.js";
import type { JobRef, LaunchBackend, LaunchRef, StopClass } from "./backends/types.js";
import type { BudgetBook } from "./book.js";
import { submissionOver } from "./budget.js";
import type { Claim, Claims } from "./claims.js";
import type { ControlBoard } from "./control.js";
import { endAttemptKey, mintAttemptKey } from "./keys.js";
import { mintAttemptNatsUser } from "./nats-users.js";
import { makeAttemptResult, publishAttemptResult } from "./results.js";
import type { RunCache } from "./runs.js";
import { StatusWriter } from "./status.js";

export const CANCELLED_ERROR = "cancelled by operator (evalfleet cancel)";

export interface DispatcherDeps {
  plane: Plane;
  db: Db;
  log: Logger;
  backend: LaunchBackend;
  book: BudgetBook;
  claims: Claims;
  runs: RunCache;
  control: () => ControlBoard;
  id: string;
  /** is the dispatcher replica with this id alive (a fresh heartbeat)? */
  alive: (id: string) => Promise<boolean>;
  publishEvent: (ev: Omit<RunEvent, "type" | "at">) => Promise<void>;
  /** overrides the seed's 2 s / 4 s / 8 s (tests) */
  retryDelaysMs?: readonly number[];
  /** the NATS account's signing key: each attempt's task gets a NATS user of its own (else none: anonymous NATS) */
  natsSigner?: AccountSigner;
  /** a claim older than this that never launched belongs to a dead replica and is taken over */
  staleClaimMs: number;
  /** how long to wait for capacity before re-reading the shared state */
  capacityPollMs: number;
  /** after a task exits, how long its own result has to arrive before the dispatcher publishes one for it */
  exitGraceMs: number;
  /**
   * The same after a clean exit (code 0): a task exits 0 only once JetStream has acked its result, so a stand-in is
   * almost always a duplicate; waiting for the result consumer to catch up keeps a loaded plane from publishing one
   * for every attempt (20,000 attempts made 39,487 result publishes).
   */
  cleanExitGraceMs: number;
}

interface InFlight {
  ref: JobRef;
  handle: string;
  base: number;
}

const key = (run: string, cell: string, attempt: number) => `${run}\u0000${cell}\u0000${attempt}`;

/**
 * The dispatcher's logic: admit a cell (capacity + budget, in KV under CAS), claim and launch its attempt, and on
 * each attempt result reconcile the budget and either relaunch (the shared retry classes) or finish the cell.
 */
export class Dispatcher {
  /** attempts this process launched and still watches */
  readonly inflight = new Map<string, InFlight>();
  /** Attempts whose result this replica has handled, so a task seen stopped gets no stand-in result after it. */
  private readonly resulted = new Set<string>();
  /** attempts whose backend launch is in progress in this process: true once it went through (a task or a result) */
  private readonly launching = new Map<string, Promise<boolean>>();
  /** attempts this process launched, with their handles (bounded like `resulted`) */
  private readonly launched = new Map<string, string>();

  private readonly status: StatusWriter;

  constructor(private readonly d: DispatcherDeps) {
    this.status = new StatusWriter(d.db);
  }

  runningOf(run: string): number {
    let n = 0;
    for (const f of this.inflight.values()) if (f.ref.runName === run) n++;
    return n;
  }

  // ---- cells ------------------------------------------------------------------------------------------------

  async handleCell(del: Delivery<CellWork>): Promise<void> {
    const w = del.value;
    const gen = del.streamSeq;
    const { claims } = this.d;
    if (await this.stoppedByControl(w)) return;
    const prev = await claims.cell(w.run, w.cellId);
    let attempt = w.firstAttempt ?? 0;
    if (prev) {
      if (prev.gen === gen) {
        // A redelivered message: the attempt may be launched already, or its claimant may have died first. The
        // budget state (one JSON per run, large with many cells open) is read only when the claim never launched.
        const c = await claims.get(w.run, w.cellId, prev.latest);
        if (!c || c.claim.launchedAt) return;
        if (await this.submissionOver(w.run, w.cellId, prev.gen)) return;
        await this.ensureLaunched(w.run, w.cellId, prev.latest, del.signal);
        return;
      }
      const over = await this.submissionOver(w.run, w.cellId, prev.gen);
      const ctx = await this.d.runs.get(w.run);
      const staleMs = (ctx.config.timeout_seconds + 120) * 1_000;
      if (!over && Date.now() - Date.parse(prev.at) < staleMs) {
        this.d.log.info({ run: w.run, cell: w.cellId }, "cell still running from an earlier submission");
        return;
      }
      // A resubmission (resume): a fresh attempt number, so its ledger rows never mix with the earlier ones.
      attempt = Math.max(prev.latest + 1, attempt);
    }
    const admitted = await this.admit(w, del);
    if (!admitted) return;
    if ((await this.d.control().fresh(w.run)) !== "active") {
      // Stopped while this cell waited (the capacity it got may be what the stop freed): hand the slot back.
      await this.d.book.reconcile(w.run, { cellId: w.cellId, attempt, actualNano: 0, final: true });
      await this.stoppedByControl(w);
      return;
    }
    await this.launchAttempt(w.run, w.cellId, w.pool, attempt, attempt, gen, del.signal);
  }

  /**
   * A cell message that failed past its tries with an error trying again will not fix (a bug, not an outage): the
   * message is gone, so the cell must not stay pending for ever. Unless its attempt is running (its result finishes
   * the cell), its reservation is released and it ends failed with the error, which the run's events say too.
   */
  async cellPoisoned(raw: Uint8Array, err: EvalfleetError): Promise<void> {
    let w: CellWork;
    try {
      w = CellWorkSchema.parse(JSON.parse(new TextDecoder().decode(raw)));
    } catch {
      return; // not a cell message at all: the poison event says so
    }
    const prev = await this.d.claims.cell(w.run, w.cellId);
    const running = prev ? await this.d.claims.get(w.run, w.cellId, prev.latest) : null;
    if (prev && running?.claim.launchedAt && !(await this.submissionOver(w.run, w.cellId, prev.gen))) return;
    const error = `the dispatcher could not handle this cell: ${err.message} (an infrastructure failure, not the model's)`;
    await this.d.book.reconcile(w.run, {
      cellId: w.cellId,
      attempt: prev?.latest ?? w.firstAttempt ?? 0,
      actualNano: 0,
      final: true,
    });
    await this.status.mark(w.run, w.cellId, "failed", error);
    await this.d.publishEvent({
      run: w.run,
      kind: "cell_failed",
      message: `${w.cellId}: ${error}`,
      data: { cellId: w.cellId },
    });
  }

  /** Has the cell's submission `gen` ended (its reservation released)? Read only off the hot path. */
  private async submissionOver(run: string, cellId: string, gen: number): Promise<boolean> {
    return submissionOver(await this.d.book.read(run), cellId, gen);
  }

  /** Drain: leave the cell pending (resume requeues it). Cancel: the cell ends failed. */
  private async stoppedByControl(w: { run: string; cellId: string }): Promise<boolean> {
    const state = this.d.control().state(w.run);
    if (state === "draining") return true;
    if (state === "cancelled") {
      await this.status.mark(w.run, w.cellId, "failed", CANCELLED_ERROR);
      return true;
    }
    return false;
  }

  /** Wait for capacity, then reserve. False when the cell was skipped or the run stopped meanwhile. */
  private async admit(w: CellWork, del: Delivery<CellWork>): Promise<boolean> {
    for (;;) {
      if (await this.stoppedByControl(w)) return false;
      const ctx = await this.d.runs.get(w.run);
      const r = await this.d.book.admit(w.run, {
        cellId: w.cellId,
        gen: del.streamSeq,
        pool: w.pool,
        exempt: w.exempt,
        estimateNano: ctx.estimate(w.exempt),
        parallel: ctx.config.parallel_runs,
        poolLimit: ctx.poolLimits[w.pool],
        budgetNano: ctx.budgetNano,
        configRev: ctx.configRev,
      });
      if (r.kind === "admitted") return true;
      if (r.kind === "skipped") {
        await this.status.mark(w.run, w.cellId, "skipped", r.reason);
        await this.cellProgress(w.run, w.cellId, 0, "skipped", r.reason);
        this.d.log.warn({ run: w.run, cell: w.cellId }, r.reason);
        await this.d.publishEvent({
          run: w.run,
          kind: "budget_skip",
          message: `${w.cellId}: ${r.reason}`,
          data: { cellId: w.cellId, remainingNanoUsd: r.remainingNano, estimateNanoUsd: r.estimateNano },
        });
        return false;
      }
      del.working();
      if (del.signal.aborted) throw new RetryableError(ErrorCode.Unavailable, "dispatcher stopping");
      await this.d.book.waitForCapacity(this.d.capacityPollMs);
    }
  }

  /**
   * An attempt that is claimed: launched → nothing to do; being launched here → nothing to do; its claimant dead
   * (no heartbeat) or the claim stale → take the claim over (compare-and-set) and launch; else try again later.
   */
  async ensureLaunched(run: string, cellId: string, attempt: number, signal: AbortSignal): Promise<void> {
    const c = await this.d.claims.get(run, cellId, attempt);
    if (!c || c.claim.launchedAt) return;
    if (await this.launchedHere(run, cellId, attempt)) return;
    const handle = this.launched.get(key(run, cellId, attempt));
    if (handle) {
      // Launched here, but the claim's record of it was lost (NATS went away before the write landed, so the cell
      // message came back): record it now, even if the task is over. Launching again would start a second task on
      // the same attempt, whose fresh workdir pulls the first one's out from under it.
      await this.recordLaunch(run, cellId, attempt, c.claim, handle);
      return;
    }
    const stale = Date.now() - Date.parse(c.claim.at) >= this.d.staleClaimMs;
    if (!stale && c.claim.by !== this.d.id && (await this.d.alive(c.claim.by)))
      throw new RetryableError(
        ErrorCode.Conflict,
        `attempt ${attempt} of ${cellId} is being launched elsewhere`,
      );
    // A replica that died between launching and recording the launch can leave its task running (a local process
    // outlives its dispatcher): record that task as the launch, still under the dead replica's name, so the reaper
    // watches it like any orphan — never a second task on the same attempt.
    const found =
      c.claim.by === this.d.id
        ? undefined
        : await this.d.backend.find?.({ runName: run, cellId, attempt, pool: c.claim.pool });
    if (found) {
      const adopted: Claim = {
        ...c.claim,
        handle: found,
        backend: this.d.backend.name,
        launchedAt: new Date().toISOString(),
      };
      if (await this.d.claims.takeOver(run, cellId, attempt, adopted, c.revision))
        this.d.log.warn(
          { run, cellId, attempt, handle: found },
          "a dead replica's unrecorded task is running",
        );
      return;
    }
    const mine: Claim = { ...c.claim, by: this.d.id, at: new Date().toISOString() };
    if (!(await this.d.claims.takeOver(run, cellId, attempt, mine, c.revision))) return;
    this.d.log.info(
      { run, cellId, attempt, from: c.claim.by },
      "took over an attempt that was claimed but never launched",
    );
    await this.start(run, cellId, attempt, mine, signal);
  }

  /**
   * Is the attempt being launched in this process for another delivery of its cell message (whose ack wait ran out
   * under load)? Then wait for that launch: true once it went through. A launch that failed throws, so this delivery
   * is not acked either: were it acked, the failed one's own delivery might be gone already, and the attempt would
   * never start. False when nothing is being launched here.
   */
  private async launchedHere(run: string, cellId: string, attempt: number): Promise<boolean> {
    const pending = this.launching.get(key(run, cellId, attempt));
    if (!pending) return false;
    if (await pending) return true;
    throw new RetryableError(
      ErrorCode.Unavailable,
      `attempt ${attempt} of ${cellId}: launching it here failed; it is tried again`,
    );
  }

  /** Claim (create fails if it exists) and launch one attempt. */
  async launchAttempt(
    run: string,
    cellId: string,
    pool: string,
    attempt: number,
    base: number,
    gen: number,
    signal: AbortSignal,
  ): Promise<void> {
    const claim: Claim = { by: this.d.id, gen, base, pool, at: new Date().toISOString() };
    if (!(await this.d.claims.create(run, cellId, attempt, claim))) {
      // Claimed before (a redelivery, another replica, or our own crash between claim and launch).
      await this.ensureLaunched(run, cellId, attempt, signal);
      return;
    }
    await this.d.claims.setCell(run, cellId, { gen, base, latest: attempt, at: claim.at });
    await this.start(run, cellId, attempt, claim, signal);
  }

  private async start(run: string, cellId: string, attempt: number, claim: Claim, signal: AbortSignal) {
    const ref: JobRef = { runName: run, cellId, attempt, pool: claim.pool };
    const k = key(run, cellId, attempt);
    // Two deliveries of one cell message may both get here (the second took the claim over before the first wrote
    // its launch record): one launches, the other waits for it.
    if (await this.launchedHere(run, cellId, attempt)) return;
    let settle: (through: boolean) => void = () => {};
    this.launching.set(k, new Promise<boolean>((r) => (settle = r)));
    let through = false;
    let res: Awaited<ReturnType<LaunchBackend["launch"]>>[number] | undefined;
    try {
      // Before the launch, so a fast attempt's final status (the results-writer's) is never overwritten by it.
      await this.status.mark(run, cellId, "running");
      await this.cellProgress(run, cellId, attempt, "running", `launching on ${this.d.backend.name}`);
      // The attempt's own gateway key, before its task can ask for it.
      const { config } = await this.d.runs.get(run);
      await mintAttemptKey(this.d.db, this.d.plane.kv.jobs, config, { run, cellId, attempt });
      // Its own NATS user, expiring with it: the task gets that and never this process's credential.
      const nats =
        this.d.natsSigner && this.d.backend.tasksConnect
          ? await mintAttemptNatsUser(this.d.natsSigner, this.d.plane.kv.jobs, config, {
              run,
              cellId,
              attempt,
            })
          : undefined;
      const launch: LaunchRef = nats
        ? { ...ref, natsCredential: { jwt: nats.jwt, seed: nats.seed, creds: nats.creds } }
        : ref;
      [res] = await this.d.backend.launch([launch], signal);
      Metrics.launches.inc({
        backend: this.d.backend.name,
        outcome: res?.handle ? "started" : (res?.error?.kind ?? "fatal"),
      });
      if (res?.handle) {
        this.inflight.set(k, { ref, handle: res.handle, base: claim.base });
        this.rememberLaunch(k, res.handle);
        await this.recordLaunch(run, cellId, attempt, claim, res.handle);
      }
      through = true;
    } finally {
      this.launching.delete(k);
      settle(through);
    }
    if (res?.handle) return;
    await this.noResult(
      ref,
      claim.base,
      res?.error ?? { kind: "fatal", reason: "launch failed", neverStarted: true },
      signal,
    );
  }

  private async recordLaunch(run: string, cellId: string, attempt: number, claim: Claim, handle: string) {
    const launched: Claim = {
      ...claim,
      by: this.d.id,
      handle,
      backend: this.d.backend.name,
      launchedAt: new Date().toISOString(),
    };
    await this.d.claims.launched(run, cellId, attempt, launched);
  }

  /**
   * A task that ended without a result of its own. A retryable infrastructure stop is never the model's failure:
   * it is retried as INFRA_RETRYABLE. A task that never started gets an INFRA_FAILURE result, anything else a
   * HARNESS_ERROR, so the cell finishes through the same path as every other result.
   */
  async noResult(
    ref: JobRef,
    base: number,
    stop: StopClass,
    signal: AbortSignal,
    out?: { stdout: string; stderr: string },
  ) {
    this.inflight.delete(key(ref.runName, ref.cellId, ref.attempt));
    if (stop.kind === "retryable") {
      await this.infraRetry(ref, base, stop.reason, signal);
      return;
    }
    const reason =
      stop.kind === "exited"
        ? `task exited with code ${stop.exitCode} without publishing a result`
        : `task could not run: ${stop.reason}`;
    // A task whose container never ran is the environment's failure, never the model's.
    const neverStarted = stop.kind === "fatal" && stop.neverStarted;
    await publishAttemptResult(
      this.d.plane.js,
      makeAttemptResult(ref, neverStarted ? "INFRA_FAILURE" : "HARNESS_ERROR", {
        exitCode: stop.kind === "exited" ? stop.exitCode : null,
        errorMessage: reason,
        stdout: out?.stdout ?? "",
        stderr: out?.stderr ?? "",
      }),
      { signal, log: this.d.log },
    );
  }

  private async infraRetry(ref: JobRef, base: number, reason: string, signal: AbortSignal): Promise<void> {
    const cls = classifyAttempt("INFRA_RETRYABLE", retriesOf(ref.attempt, base));
    if (!cls.retry || this.d.control().state(ref.runName) !== "active") {
      await this.giveUp(ref.runName, ref.cellId, ref.attempt, reason);
      return;
    }
    await this.delay(cls.retryDelayMs, retriesOf(ref.attempt, base), signal);
    const cur = await this.d.claims.get(ref.runName, ref.cellId, ref.attempt);
    await this.launchAttempt(
      ref.runName,
      ref.cellId,
      ref.pool,
      ref.attempt + 1,
      base,
      cur?.claim.gen ?? 0,
      signal,
    );
  }

  /**
   * Infrastructure retries exhausted: the attempt lands as INFRA_FAILURE through the ordinary result path (a row,
   * counted apart from the model's outcomes, the reservation released when it is handled). A run that stopped
   * instead: release the reservation, the cell ends failed.
   */
  async giveUp(run: string, cellId: string, attempt: number, reason: string): Promise<void> {
    if (this.d.control().state(run) === "active") {
      await publishAttemptResult(
        this.d.plane.js,
        makeAttemptResult({ runName: run, cellId, attempt }, "INFRA_FAILURE", {
          errorMessage: `infrastructure retries exhausted: ${reason}`,
        }),
        { log: this.d.log },
      );
      return;
    }
    await this.d.book.reconcile(run, { cellId, attempt, actualNano: 0, final: true });
    await this.finish(run, cellId, attempt, "failed", this.stopError(run, reason));
  }

  // ---- attempt results --------------------------------------------------------------------------------------

  async handleResult(del: Delivery<AttemptResult>): Promise<void> {
    const r = del.value;
    const c = await this.d.claims.get(r.run, r.cellId, r.attempt);
    if (!c) {
      this.d.log.debug({ run: r.run, cell: r.cellId, attempt: r.attempt }, "result of an unclaimed attempt");
      return;
    }
    this.inflight.delete(key(r.run, r.cellId, r.attempt));
    this.rememberResult(key(r.run, r.cellId, r.attempt));
    // The attempt is over, whatever comes next: its key stops working at the gateway.
    await endAttemptKey(this.d.db, { run: r.run, cellId: r.cellId, attempt: r.attempt });
    const { base, gen, pool } = c.claim;
    const cell = await this.d.claims.cell(r.run, r.cellId);
    const superseded = cell !== null && cell.latest > r.attempt;
    // The run's timeout_policy decides whether a TIMEOUT is retried; without its config the seed's rule holds.
    const timeoutPolicy = await this.d.runs.get(r.run).then(
      (c) => c.config.timeout_policy,
      () => undefined,
    );
    const cls = classifyAttempt(r.status, retriesOf(r.attempt, base), { timeoutPolicy });
    const state = this.d.control().state(r.run);
    const final = !superseded && (cls.final || state !== "active");
    // What the attempt reported, or what the ledger already holds of it when that is more (a task that died
    // without a result reports 0; its calls are in the ledger or the gateway's log).
    const ledgered = await attemptBillableNanoUsd(this.d.db, r.run, r.cellId, r.attempt).catch(
      (err: unknown) => {
        this.d.log.warn(
          { err: String(err), run: r.run, cell: r.cellId },
          "reading the attempt's ledger failed",
        );
        return 0;
      },
    );
    const rec = await this.d.book.reconcile(r.run, {
      cellId: r.cellId,
      attempt: r.attempt,
      actualNano: Math.max(r.usage.costNanoUsd, ledgered),
      final,
    });
    if (rec.overspent)
      await this.d.publishEvent({
        run: r.run,
        kind: "budget_overspend",
        message: `spend exceeded the budget after ${r.cellId} (remaining ${rec.remainingNano} nano-USD)`,
        data: { cellId: r.cellId, remainingNanoUsd: rec.remainingNano },
      });
    if (superseded) {
      // The next attempt exists; make sure it really started (its launcher may have died in between).
      if (cell) await this.ensureLaunched(r.run, r.cellId, cell.latest, del.signal);
      return;
    }
    if (final) {
      // The reservation released above is what marks the cell's submission over (no record of it to write).
      if (state === "cancelled") await this.finish(r.run, r.cellId, r.attempt, "failed", CANCELLED_ERROR);
      else if (!cls.final)
        await this.finish(r.run, r.cellId, r.attempt, "failed", this.stopError(r.run, cls.errorClass));
      return;
    }
    // Retry: the message stays unacked until the next attempt is launched, so a crash here retries the retry.
    await this.delay(cls.retryDelayMs, retriesOf(r.attempt, base), del.signal, () => del.working());
    if (this.d.control().state(r.run) !== "active") {
      await this.d.book.reconcile(r.run, {
        cellId: r.cellId,
        attempt: r.attempt,
        actualNano: 0,
        final: true,
      });
      await this.finish(r.run, r.cellId, r.attempt, "failed", this.stopError(r.run, cls.errorClass));
      return;
    }
    await this.launchAttempt(r.run, r.cellId, pool, r.attempt + 1, base, gen, del.signal);
  }

  private stopError(run: string, why: string): string {
    return this.d.control().state(run) === "cancelled" ? CANCELLED_ERROR : `drained before retry (${why})`;
  }

  private async delay(defaultMs: number, retry: number, signal: AbortSignal, working?: () => void) {
    const ms = this.d.retryDelaysMs?.[retry] ?? defaultMs;
    const until = Date.now() + ms;
    while (Date.now() < until) {
      working?.();
      try {
        await sleep(Math.min(5_000, until - Date.now()), undefined, { signal });
      } catch {
        throw new RetryableError(ErrorCode.Unavailable, "dispatcher stopping during a retry delay");
      }
    }
  }

  /** A final outcome the dispatcher decided itself (cancel, drain, infrastructure exhausted). */
  private async finish(run: string, cellId: string, attempt: number, status: "failed", error: string) {
    await this.status.mark(run, cellId, status, error);
    await this.cellProgress(run, cellId, attempt, status, error);
    await this.d.publishEvent({
      run,
      kind: "cell_failed",
      message: `${cellId}: ${error}`,
      data: { cellId, attempt },
    });
  }

  // ---- control and observation ------------------------------------------------------------------------------

  /** Cancel: signal each running attempt's task to end its session, and stop it. */
  async cancelRun(run: string): Promise<void> {
    const mine = [...this.inflight.values()].filter((f) => f.ref.runName === run);
    for (const f of mine) {
      this.d.plane.nc.publish(
        Subjects.attemptSignal(run, f.ref.cellId, f.ref.attempt),
        JSON.stringify({ reason: "cancelled", run, cellId: f.ref.cellId, attempt: f.ref.attempt }),
      );
    }
    if (mine.length > 0)
      await this.d.backend.stop(
        mine.map((f) => f.handle),
        "run cancelled",
      );
  }

  private rememberLaunch(k: string, handle: string): void {
    this.launched.set(k, handle);
    if (this.launched.size > 100_000)
      for (const old of this.launched.keys()) {
        this.launched.delete(old);
        if (this.launched.size <= 50_000) break;
      }
  }

  private rememberResult(k: string): void {
    this.resulted.add(k);
    // Bounded: the oldest entries are long past any grace period.
    if (this.resulted.size > 100_000)
      for (const old of this.resulted) {
        this.resulted.delete(old);
        if (this.resulted.size <= 50_000) break;
      }
  }

  /** One pass over this process's tasks: a task that stopped without a result gets one. */
  async observeOnce(signal: AbortSignal): Promise<void> {
    const all = [...this.inflight.values()];
    if (all.length === 0) return;
    const byHandle = new Map(all.map((f) => [f.handle, f]));
    const states = await this.d.backend.observe(all.map((f) => f.handle));
    for (const s of states) {
      const f = byHandle.get(s.handle);
      if (!f || s.phase !== "stopped" || !s.stop) continue;
      this.inflight.delete(key(f.ref.runName, f.ref.cellId, f.ref.attempt));
      const stop = s.stop;
      const clean = stop.kind === "exited" && stop.exitCode === 0;
      const out = (
        this.d.backend as { output?: (h: string) => { stdout: string; stderr: string } | undefined }
      ).output?.(f.handle);
      // The task's own result (published before it exited) wins: ours carries the same message id, and is not
      // sent at all once the real one has been handled here.
      setTimeout(
        () => {
          if (this.resulted.delete(key(f.ref.runName, f.ref.cellId, f.ref.attempt))) return;
          // Stopped meanwhile: this replica speaks for nothing any more; the next one's reaper finds the attempt.
          if (signal.aborted) return;
          this.standIn(f, stop, signal, out).catch((err: unknown) =>
            this.d.log.error(
              { err: String(err), ref: f.ref },
              "could not finish a task that ended without a result",
            ),
          );
        },
        clean ? this.d.cleanExitGraceMs : this.d.exitGraceMs,
      ).unref();
    }
  }

  /**
   * A task stopped and its result has not been handled here within the grace: publish one for it, unless its own is
   * in the stream already (a loaded plane handles results late; a stand-in would only be a duplicate that JetStream
   * drops, yet every consumer of the subject would still see it go by). A lookup that fails publishes: the message
   * id keeps a duplicate out of the stream either way.
   */
  private async standIn(
    f: InFlight,
    stop: StopClass,
    signal: AbortSignal,
    out: { stdout: string; stderr: string } | undefined,
  ): Promise<void> {
    const subject = Subjects.attempts.one(f.ref.runName, f.ref.cellId, f.ref.attempt);
    const own = await this.d.plane.jsm.streams
      .getMessage(Streams.attempts.name, { last_by_subj: subject })
      .catch(() => null);
    if (own) return;
    await this.noResult(f.ref, f.base, stop, signal, out);
  }

  private async cellProgress(
    run: string,
    cellId: string,
    attempt: number,
    status: CellProgress["status"],
    detail: string,
  ) {
    const p: CellProgress = {
      type: MessageTypes.cellProgress,
      run,
      cellId,
      attempt,
      status,
      usage: emptyUsage(),
      turns: 0,
      pacerWaitMs: 0,
      updatedAt: new Date().toISOString(),
      detail,
    };
    await this.d.plane.kv.progress.put(ProgressKeys.cell(run, cellId), JSON.stringify(p)).catch(() => {});
  }
}
