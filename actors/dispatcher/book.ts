import type { KV } from "@nats-io/kv";
import type { Logger } from "../../lib/log.js";
import { compareAndSet, TypedKv } from "../../plane/kv.js";
import { BudgetStateSchema } from "../../protocol/state.js";
import { StateKeys } from "../../protocol/subjects.js";
import {
  type AdmitRequest,
  type AdmitResult,
  applyOp,
  type BudgetOp,
  type BudgetOpResult,
  type BudgetState,
  counts,
  formatUsd4,
  type LedgerResult,
  newBudgetState,
  type ReconcileRequest,
  type ReconcileResult,
} from "./budget.js";

/** How a run's budget state is first created: the cap and the billable spend already in the results DB. */
export type BudgetSeed = (
  run: string,
) => Promise<{ budgetNano: number | null; historicalBillableNano: number; configRev: number }>;

interface Pending {
  op: BudgetOp;
  resolve(r: BudgetOpResult): void;
  reject(e: unknown): void;
}

const MAX_CAS_TRIES = 200;

/**
 * The budget book: every admission and reconciliation is a compare-and-set on the run's key in the `budgets`
 * bucket (update with the read revision; on conflict, re-read and re-apply). Ops for one run queued in this
 * process are applied together in one CAS, so thousands of cells cost tens of KV writes, not thousands, and
 * replicas contend on few writes.
 */
export class BudgetBook {
  private readonly queues = new Map<string, Pending[]>();
  private readonly busy = new Set<string>();
  private readonly waiters = new Set<() => void>();
  /** Runs booked in here with a cap, until they have nothing open: the ones whose ledger the budget follows. */
  private readonly following = new Set<string>();

  private readonly states: TypedKv<typeof BudgetStateSchema>;

  constructor(
    kv: KV,
    private readonly seed: BudgetSeed,
    private readonly log: Logger,
  ) {
    this.states = new TypedKv(kv, BudgetStateSchema, "budget state");
  }

  admit(run: string, op: Omit<AdmitRequest, "kind">): Promise<AdmitResult> {
    return this.enqueue(run, { kind: "admit", ...op }) as Promise<AdmitResult>;
  }

  reconcile(run: string, op: Omit<ReconcileRequest, "kind">): Promise<ReconcileResult> {
    return this.enqueue(run, { kind: "reconcile", ...op }) as Promise<ReconcileResult>;
  }

  /**
   * True each followed run's balance up to its ledger (`billableOf`: the run's billable spend now; budget.ts
   * followLedger says how). A run leaves the set once it has nothing open, and comes back when it books again.
   */
  async followLedgers(billableOf: (run: string) => Promise<Record<string, number>>): Promise<void> {
    for (const run of [...this.following]) {
      const state = await this.read(run);
      if (!state || state.budgetNano === null) {
        this.following.delete(run);
        continue;
      }
      const r = (await this.enqueue(run, {
        kind: "ledger",
        byCell: await billableOf(run),
      })) as LedgerResult;
      if (r.changed)
        this.log.info(
          { run, extraNano: r.extraNano, remainingNano: r.remainingNano },
          `budget: the ledger holds ${formatUsd4(r.extraNano)} no attempt reported; ${formatUsd4(r.remainingNano)} remains`,
        );
      if (Object.keys(state.open).length === 0) this.following.delete(run);
    }
  }

  /** Resolves on the next local release of capacity, or after `ms` (another replica may have released). */
  waitForCapacity(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(t);
        this.waiters.delete(done);
        resolve();
      };
      const t = setTimeout(done, ms);
      this.waiters.add(done);
    });
  }

  async read(run: string): Promise<BudgetState | null> {
    return (await this.states.get(StateKeys.budget(run)))?.value ?? null;
  }

  private enqueue(run: string, op: BudgetOp): Promise<BudgetOpResult> {
    if (op.kind === "admit") this.following.add(run);
    return new Promise((resolve, reject) => {
      let q = this.queues.get(run);
      if (!q) {
        q = [];
        this.queues.set(run, q);
      }
      q.push({ op, resolve, reject });
      if (!this.busy.has(run)) void this.pump(run);
    });
  }

  private async pump(run: string): Promise<void> {
    this.busy.add(run);
    try {
      for (;;) {
        const q = this.queues.get(run);
        if (!q || q.length === 0) break;
        const batch = q.splice(0, q.length);
        try {
          const results = await this.casApply(
            run,
            batch.map((p) => p.op),
          );
          let released = false;
          batch.forEach((p, i) => {
            const r = results[i]!;
            if (r.kind === "reconciled" && r.released) released = true;
            p.resolve(r);
          });
          if (released) for (const w of [...this.waiters]) w();
        } catch (err) {
          this.log.error({ run, err }, "budget state update failed");
          for (const p of batch) p.reject(err);
        }
      }
    } finally {
      this.busy.delete(run);
      this.queues.delete(run);
    }
  }

  /** Apply the ops to the run's state in one compare-and-set (re-applied to a fresh read after a conflict). */
  private casApply(run: string, ops: BudgetOp[]): Promise<BudgetOpResult[]> {
    return compareAndSet(
      this.states,
      StateKeys.budget(run),
      async (current) => {
        // Each try decodes a fresh copy, so the ops may change it in place.
        let state: BudgetState;
        if (current) state = current.value;
        else {
          const s = await this.seed(run);
          state = newBudgetState(run, s.budgetNano, s.historicalBillableNano, s.configRev);
        }
        const running = counts(state);
        const results = ops.map((op) => applyOp(state, op, running));
        // Only reads (waits, skips, repeats): decided on a consistent snapshot, nothing to write.
        if (!running.changed && current) return { result: results };
        return { write: state, result: results };
      },
      { tries: MAX_CAS_TRIES },
    );
  }
}
