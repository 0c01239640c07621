import type { JetStreamManager } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import type { Logger } from "../../lib/log.js";
import { compareAndSet, TypedKv } from "../../plane/kv.js";
import { purgeAttemptKeys } from "../../plane/prune.js";
import {
  type CellProgress,
  CellProgressSchema,
  MessageTypes,
  type RunProgress,
  RunProgressSchema,
} from "../../protocol/messages.js";
import { nanoToUsd } from "../../protocol/money.js";
import { ProgressKeys } from "../../protocol/subjects.js";
import { Consumers, Streams } from "../../protocol/topology.js";
import type { Db } from "../../store/db.js";
import { revokeRunKeys } from "../../store/keys.js";
import { reconcileRun, settleFromGateway } from "../../store/reconcile.js";
import { countInfraFailures, getCellStatuses, getSeedCounts } from "../../store/results.js";
import { securityCounts } from "../../store/security.js";
import { getRunSpend } from "../../store/writer.js";
import type { Actor } from "../runtime/actor.js";

/** A cell's final figures for its `cell.<run>.<cell>` key. */
export interface CellFinal {
  run: string;
  cellId: string;
  attempt: number;
  status: CellProgress["status"];
  usage: CellProgress["usage"];
  detail?: string;
}

export interface ProgressOptions {
  kv: KV;
  /** the jobs bucket, where attempt keys are handed to tasks (purged when the run finishes) */
  jobs?: KV;
  jsm: JetStreamManager;
  db: Db;
  log: Logger;
  actor: Actor;
  /** Coalescing interval: each run's key is written at most once per interval. */
  intervalMs?: number;
  /** Unfinished runs are re-counted this often even without new results (a budget skip can end a run). */
  recheckMs?: number;
  /** `finished` waits for every enqueued grade and verdict to land (default true). */
  waitForScores?: boolean;
}

const CAS_TRIES = 8;
/** A flush slowed by queueing (PGlite runs one statement at a time) must not postpone the next one for long. */
const MAX_INTERVAL_MS = 2_000;
/** A run with no new results for this long is no longer re-counted on a timer (abandoned, or waiting on a human). */
const OPEN_IDLE_MS = 10 * 60_000;

/**
 * Live progress in KV, coalesced: handlers mark a run dirty after their commit; a timer recounts dirty runs from
 * run_state and the ledger and writes `run.<run>` with compare-and-set, merged onto what the planner and
 * dispatcher put there (budget, pools). The write that moves a run to `finished` publishes the finished event, so
 * concurrent replicas announce it once.
 */
export class ProgressWriter {
  private readonly dirty = new Set<string>();
  /** Unfinished runs this writer has touched, and when it last did: re-counted until finished or idle. */
  private readonly open = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> = Promise.resolve();
  private lastRecheck = Date.now();
  private stopped = false;
  /** Per run whose cells are all done: the ledger stream's last sequence when that was first seen. */
  private readonly ledgerMarks = new Map<string, number>();

  private readonly runs: TypedKv<typeof RunProgressSchema>;
  private readonly cells: TypedKv<typeof CellProgressSchema>;

  constructor(private readonly o: ProgressOptions) {
    this.runs = new TypedKv(o.kv, RunProgressSchema, "run progress");
    this.cells = new TypedKv(o.kv, CellProgressSchema, "cell progress");
  }

  start(): void {
    this.schedule(this.o.intervalMs ?? 250);
  }

  /**
   * Recounting a run costs queries that grow with its size, so the next flush waits at least eight times as long
   * as this one took: a large run is recounted about once a second, and the counting never crowds out the writes.
   */
  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      const t0 = performance.now();
      void this.flush().then(() =>
        this.schedule(
          Math.min(MAX_INTERVAL_MS, Math.max(this.o.intervalMs ?? 250, 8 * (performance.now() - t0))),
        ),
      );
    }, ms);
    this.timer.unref();
  }

  /**
   * Runs left unfinished by a writer that stopped between its last ack and its last progress write would never
   * be looked at again (nothing is redelivered): at start, every run whose key says it is still going is
   * re-counted once, and finished if it is done.
   */
  async adoptOpenRuns(): Promise<void> {
    const filter = ProgressKeys.allRuns;
    const keys: string[] = [];
    for await (const k of await this.o.kv.keys(filter)) keys.push(k);
    for (const key of keys) {
      const p = (await this.runs.get(key).catch(() => null))?.value;
      if (p && (p.phase === "planned" || p.phase === "running" || p.phase === "draining"))
        this.markDirty(p.run);
    }
  }

  markDirty(run: string): void {
    this.dirty.add(run);
    this.open.set(run, Date.now());
  }

  /** Write every dirty run now (and, when due, re-count the unfinished ones). Serialised with the timer. */
  flush(): Promise<void> {
    this.running = this.running.then(() => this.flushOnce());
    return this.running;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.flush();
  }

  private async flushOnce(): Promise<void> {
    const due = Date.now() - this.lastRecheck >= (this.o.recheckMs ?? 2_000);
    if (due) this.lastRecheck = Date.now();
    if (due) for (const [run, at] of this.open) if (Date.now() - at > OPEN_IDLE_MS) this.open.delete(run);
    const runs = new Set(due ? [...this.dirty, ...this.open.keys()] : this.dirty);
    this.dirty.clear();
    for (const run of runs) {
      try {
        const finished = await this.updateRun(run);
        if (finished) this.open.delete(run);
      } catch (err) {
        this.o.log.warn({ run, err }, "progress update failed; will retry");
        this.dirty.add(run);
      }
    }
  }

  /**
   * At the end of a run: reconcile the ledger with the gateway's spend log per cell (each difference flagged in the
   * run's events), and revoke the run's gateway keys (a resubmission makes a new one).
   */
  private async reconcile(run: string): Promise<void> {
    const r = await reconcileRun(this.o.db, run);
    for (const f of r?.flagged.slice(0, 50) ?? [])
      await this.o.actor.publishEvent({
        run,
        kind: "reconcile_flag",
        message: `cell ${f.cellId}: gateway spend $${nanoToUsd(f.gatewayNanoUsd)} vs ledger $${nanoToUsd(f.ledgerNanoUsd)} (difference $${nanoToUsd(f.differenceNanoUsd)}${f.pendingCalls ? `, ${f.pendingCalls} gateway calls never settled` : ""})`,
        data: { ...f },
      });
    await revokeRunKeys(this.o.db, run);
    // Every attempt key is revoked now (each when its attempt ended, any a dead replica left just above): their
    // plaintext leaves the jobs bucket in one purge.
    if (this.o.jobs) await purgeAttemptKeys(this.o.jsm, run);
  }

  /** Recount one run and write its key. Returns whether the run is finished. */
  async updateRun(run: string): Promise<boolean> {
    const t0 = performance.now();
    const [counts, spentSoFar, security, seedSoFar, infraFailures] = await Promise.all([
      getCellStatuses(this.o.db, run),
      getRunSpend(this.o.db, run),
      securityCounts(this.o.db, run),
      getSeedCounts(this.o.db, run),
      countInfraFailures(this.o.db, run),
    ]);
    const securityEvents = Object.values(security).reduce((a, b) => a + b, 0);
    const n = (s: string) => Number(counts[s] ?? 0);
    const c = {
      completed: n("completed"),
      failed: n("failed"),
      skipped: n("skipped"),
      running: n("running"),
      pending: n("pending"),
    };
    const totalCells = Object.values(counts).reduce((a, b) => a + Number(b), 0);
    const cellsDone = totalCells > 0 && c.pending + c.running === 0;
    const done =
      cellsDone &&
      (this.o.waitForScores === false || spentSoFar.awaitingScore === 0) &&
      (await this.ledgerLanded(run));
    if (!cellsDone) this.ledgerMarks.delete(run);
    let spend = spentSoFar;
    let seed = seedSoFar;
    // Every call has landed that will: the calls no shim could meter (killed, or cut off after the send) settle from
    // the gateway's spend log now, so the run's figures and its reconciliation include them.
    const settled = done ? await settleFromGateway(this.o.db, run) : 0;
    if (settled > 0) {
      spend = await getRunSpend(this.o.db, run);
      seed = await getSeedCounts(this.o.db, run);
    }
    const money = `spent $${nanoToUsd(spend.totalNanoUsd)} (billable $${nanoToUsd(spend.billableNanoUsd)}${
      spend.estimatedCalls
        ? `; $${nanoToUsd(spend.estimatedNanoUsd ?? 0)} of it estimated, ${spend.estimatedCalls} calls whose answer reached nobody`
        : ""
    })`;
    const key = ProgressKeys.run(run);
    const written = await compareAndSet(
      this.runs,
      key,
      async (entry) => {
        const prev = entry?.value ?? null;
        // The seed's counters (OrchestratorProgress): completed = passed (exit_class pass), failed = fail or a kill,
        // skipped = the budget cap's skips plus the cells an earlier submission already completed; a cell awaiting
        // its grade is not counted yet. The top-level counts stay run_state's (cells by status), which watch, the
        // dashboard and the finish condition read.
        const already = prev?.alreadyCompleted ?? 0;
        const alreadyPassed = prev?.alreadyPassed ?? 0;
        const seedCounters = {
          completed: Math.max(0, seed.pass - alreadyPassed),
          failed: Math.max(0, seed.notPass - (already - alreadyPassed)),
          skipped: seed.skipped + already,
        };
        const counters = c;
        const tally = `${counters.completed} completed, ${counters.failed} failed, ${counters.skipped} skipped`;
        let phase: RunProgress["phase"] = prev?.phase ?? "running";
        if (done && phase !== "cancelled") phase = "finished";
        else if (!done && (phase === "finished" || phase === "rejected")) phase = "running";
        // A planned run becomes running once any cell has moved.
        else if (!done && phase === "planned" && c.pending < totalCells) phase = "running";
        const refused =
          (infraFailures > 0
            ? `; ${infraFailures} infrastructure failures (not the model's; out of the resolved rate)`
            : "") +
          (securityEvents > 0 ? `; ${securityEvents} forged messages refused (security events)` : "");
        const message =
          phase === "finished"
            ? `finished: ${tally} of ${totalCells} cells; ${money}${refused}`
            : `${totalCells} cells: ${tally}, ${counters.running} running, ${counters.pending} pending; ${money}${
                cellsDone && spend.awaitingScore > 0
                  ? `; ${spend.awaitingScore} attempts awaiting grades`
                  : ""
              }${refused}`;
        const next: RunProgress = {
          ...(prev ?? { budgetNanoUsd: null }),
          type: MessageTypes.runProgress,
          run,
          phase,
          message,
          totalCells,
          ...counters,
          seed: seedCounters,
          errors: seed.errors,
          totalCostNanoUsd: spend.totalNanoUsd,
          billableCostNanoUsd: spend.billableNanoUsd,
          securityEvents,
          infraFailures,
          updatedAt: new Date().toISOString(),
        };
        const finishing = phase === "finished" && prev?.phase !== "finished";
        // Before the key says finished: a writer that dies in between leaves the run unfinished, so the next one
        // (adoptOpenRuns) reconciles it; after, nothing would ever look at the run again. Reconciling twice (a
        // lost compare-and-set decides again) is harmless: upserts, an idempotent revoke.
        // A finished run's calls settled late (a killed gateway replica's, once it was known dead): reconcile again.
        if (finishing || (settled > 0 && phase === "finished")) await this.reconcile(run);
        return { write: next, result: { phase, finishing, tally, counters } };
      },
      { tries: CAS_TRIES },
    );
    if (written.finishing) {
      await this.o.actor.publishEvent({
        run,
        kind: "finished",
        message: `run ${run} finished: ${written.tally} of ${totalCells} cells; ${money}`,
        data: {
          totalCells,
          ...written.counters,
          totalCostNanoUsd: spend.totalNanoUsd,
          billableCostNanoUsd: spend.billableNanoUsd,
        },
      });
    }
    this.o.log.debug({ run, phase: written.phase, ms: Math.round(performance.now() - t0) }, "run progress");
    return written.phase === "finished" || written.phase === "cancelled";
  }

  /**
   * Every ledger call of a run is published before its attempt's result, but the two streams are consumed
   * apart: when the last result lands, calls may still be in flight. The run is finished only once the ledger
   * consumer has acked everything up to the stream's end as of that moment (a mark taken once, so steady traffic
   * of other runs cannot keep it moving). Until then the run stays dirty and is looked at again next interval.
   */
  private async ledgerLanded(run: string): Promise<boolean> {
    let mark = this.ledgerMarks.get(run);
    if (mark === undefined) {
      mark = (await this.o.jsm.streams.info(Streams.ledger.name)).state.last_seq;
      this.ledgerMarks.set(run, mark);
    }
    const def = Consumers.resultsWriterLedger;
    const floor = (await this.o.jsm.consumers.info(def.stream, def.durable)).ack_floor.stream_seq;
    if (floor >= mark) {
      this.ledgerMarks.delete(run);
      return true;
    }
    this.dirty.add(run);
    return false;
  }

  /** Each finished cell's `cell.<run>.<cell>` key, keeping what the shim wrote there (turns, pacer wait). */
  async putCells(cells: readonly CellFinal[]): Promise<void> {
    await Promise.all(
      cells.map(async (f) => {
        const key = ProgressKeys.cell(f.run, f.cellId);
        // A record this version cannot read is replaced: the cell's final state is what matters now.
        const prev = (await this.cells.get(key).catch(() => null))?.value;
        const value: CellProgress = {
          type: MessageTypes.cellProgress,
          run: f.run,
          cellId: f.cellId,
          attempt: f.attempt,
          status: f.status,
          usage: f.usage,
          turns: prev?.attempt === f.attempt ? prev.turns : 0,
          pacerWaitMs: prev?.attempt === f.attempt ? prev.pacerWaitMs : 0,
          updatedAt: new Date().toISOString(),
          ...(f.detail ? { detail: f.detail } : {}),
        };
        await this.cells.put(key, value);
      }),
    );
  }
}
