import type { JetStreamManager } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import { revokeRunKeys } from "../../gateway-sidecar/keys.js";
import { reconcileRun } from "../../gateway-sidecar/reconcile.js";
import type { Logger } from "../../protocol/log.js";
import {
  type CellProgress,
  CellProgressSchema,
  MessageTypes,
  type RunProgress,
  RunProgressSchema,
} from "../../protocol/messages.js";
import { ProgressKeys, StateKeys } from "../../protocol/subjects.js";
import { Consumers, Streams } from "../../protocol/topology.js";
import type { Db } from "../../store/db.js";
import { nanoToUsd } from "../../store/money.js";
import { getCellStatuses } from "../../store/results.js";
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
  /** the jobs bucket, where a run's gateway key is handed to its tasks (deleted when the run finishes) */
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

  constructor(private readonly o: ProgressOptions) {}

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
    // ProgressKeys.run(name) is `<prefix><token>`: the wildcard over every run is that prefix plus `*`.
    const filter = `${ProgressKeys.run("_").slice(0, -1)}*`;
    const keys: string[] = [];
    for await (const k of await this.o.kv.keys(filter)) keys.push(k);
    for (const key of keys) {
      const entry = await this.o.kv.get(key);
      const p = readProgress(entry?.operation === "PUT" ? entry.value : undefined);
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
    await this.o.jobs?.delete(StateKeys.runKey(run));
  }

  /** Recount one run and write its key. Returns whether the run is finished. */
  async updateRun(run: string): Promise<boolean> {
    const t0 = performance.now();
    const [counts, spend] = await Promise.all([getCellStatuses(this.o.db, run), getRunSpend(this.o.db, run)]);
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
      (this.o.waitForScores === false || spend.awaitingScore === 0) &&
      (await this.ledgerLanded(run));
    if (!cellsDone) this.ledgerMarks.delete(run);
    const money = `spent $${nanoToUsd(spend.totalNanoUsd)} (billable $${nanoToUsd(spend.billableNanoUsd)})`;
    const tally = `${c.completed} completed, ${c.failed} failed, ${c.skipped} skipped`;
    const key = ProgressKeys.run(run);
    for (let i = 0; i < CAS_TRIES; i++) {
      const entry = await this.o.kv.get(key);
      const prev = readProgress(entry?.operation === "PUT" ? entry.value : undefined);
      let phase: RunProgress["phase"] = prev?.phase ?? "running";
      if (done && phase !== "cancelled") phase = "finished";
      else if (!done && (phase === "finished" || phase === "rejected")) phase = "running";
      // A planned run becomes running once any cell has moved.
      else if (!done && phase === "planned" && c.pending < totalCells) phase = "running";
      const message =
        phase === "finished"
          ? `finished: ${tally} of ${totalCells} cells; ${money}`
          : `${totalCells} cells: ${tally}, ${c.running} running, ${c.pending} pending; ${money}${
              cellsDone && spend.awaitingScore > 0 ? `; ${spend.awaitingScore} attempts awaiting grades` : ""
            }`;
      const next: RunProgress = {
        ...(prev ?? { budgetNanoUsd: null }),
        type: MessageTypes.runProgress,
        run,
        phase,
        message,
        totalCells,
        ...c,
        totalCostNanoUsd: spend.totalNanoUsd,
        billableCostNanoUsd: spend.billableNanoUsd,
        updatedAt: new Date().toISOString(),
      };
      const finishing = phase === "finished" && prev?.phase !== "finished";
      // Before the key says finished: a writer that dies in between leaves the run unfinished, so the next one
      // (adoptOpenRuns) reconciles it; after, nothing would ever look at the run again. Reconciling twice is
      // harmless (upserts, an idempotent revoke).
      if (finishing) await this.reconcile(run);
      try {
        if (entry) await this.o.kv.update(key, JSON.stringify(next), entry.revision);
        else await this.o.kv.create(key, JSON.stringify(next));
      } catch (err) {
        if (i === CAS_TRIES - 1) throw err;
        continue; // someone else wrote the key between our read and write: merge again
      }
      if (finishing) {
        await this.o.actor.publishEvent({
          run,
          kind: "finished",
          message: `run ${run} finished: ${tally} of ${totalCells} cells; ${money}`,
          data: {
            totalCells,
            ...c,
            totalCostNanoUsd: spend.totalNanoUsd,
            billableCostNanoUsd: spend.billableNanoUsd,
          },
        });
      }
      this.o.log.debug({ run, phase, ms: Math.round(performance.now() - t0) }, "run progress");
      return phase === "finished" || phase === "cancelled";
    }
    return false;
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
        const entry = await this.o.kv.get(key);
        const prev = readCell(entry?.operation === "PUT" ? entry.value : undefined);
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
        await this.o.kv.put(key, JSON.stringify(value));
      }),
    );
  }
}

function readProgress(value: Uint8Array | undefined): RunProgress | null {
  if (!value || value.length === 0) return null;
  try {
    const r = RunProgressSchema.safeParse(JSON.parse(new TextDecoder().decode(value)));
    return r.success ? r.data : null;
  } catch {
    return null;
  }
}

function readCell(value: Uint8Array | undefined): CellProgress | null {
  if (!value || value.length === 0) return null;
  try {
    const r = CellProgressSchema.safeParse(JSON.parse(new TextDecoder().decode(value)));
    return r.success ? r.data : null;
  } catch {
    return null;
  }
}
