/**
 * The seed's reserve → execute → reconcile, as pure functions over one run's budget state. The state lives in the
 * `budgets` KV bucket and every change is a compare-and-set (see book.ts), so any number of dispatcher replicas
 * share one balance without a process lock.
 */

import type { RunConfig } from "../../protocol/config.js";
import { nanoToNumber, usdToNano } from "../../protocol/money.js";
import type { BudgetState } from "../../protocol/state.js";

export type { BudgetState, OpenCell } from "../../protocol/state.js";

export function newBudgetState(
  run: string,
  budgetNano: number | null,
  historicalBillableNano: number,
  configRev = 0,
): BudgetState {
  return {
    v: 1,
    run,
    budgetNano,
    // remaining = budget − billable historical spend, exactly once, when the state is first created.
    remainingNano: budgetNano === null ? 0 : budgetNano - historicalBillableNano,
    historicalBillableNano,
    totalNano: 0,
    billableNano: 0,
    ledgerExtraNano: 0,
    open: {},
    configRev,
    createdAt: new Date().toISOString(),
  };
}

/** What the admission gate is asked about one cell. */
export interface AdmitRequest {
  kind: "admit";
  cellId: string;
  pool: string;
  exempt: boolean;
  estimateNano: number;
  /** the run's parallel_runs */
  parallel: number;
  /** the pool's fleet size when known */
  poolLimit?: number | undefined;
  /** the run's budget_usd now (a resubmission may raise it) */
  budgetNano: number | null;
  /** the jobs-bucket revision of the config `budgetNano` came from */
  configRev: number;
  /** the admitting cell message's stream sequence, kept on the open entry (which submission holds it) */
  gen?: number;
}

export type AdmitResult =
  | { kind: "admitted"; reservedNano: number; already: boolean; remainingNano: number }
  | { kind: "wait" }
  | { kind: "skipped"; reason: string; remainingNano: number; estimateNano: number };

export interface ReconcileRequest {
  kind: "reconcile";
  cellId: string;
  attempt: number;
  actualNano: number;
  /** release the reservation and the capacity slot (the cell's final outcome) */
  final: boolean;
}

export type ReconcileResult = {
  kind: "reconciled";
  applied: boolean;
  released: boolean;
  remainingNano: number;
  /** the balance went below zero with this change */
  overspent: boolean;
};

/** The run's billable spend per cell as the ledger (and the gateway's settled log) hold it now. */
export interface LedgerRequest {
  kind: "ledger";
  byCell: Readonly<Record<string, number>>;
}

export type LedgerResult = { kind: "ledgered"; extraNano: number; remainingNano: number; changed: boolean };

/**
 * Whether the cell's submission `gen` is over: its reservation released. An open entry admitted by another message
 * (a resubmission that has not launched yet) means this one is over; one from before entries carried their
 * generation is taken as this one's.
 */
export function submissionOver(state: BudgetState | null, cellId: string, gen: number): boolean {
  const open = state?.open[cellId];
  if (!open) return true;
  return open.g !== undefined && open.g !== gen;
}

export type BudgetOp = AdmitRequest | ReconcileRequest | LedgerRequest;
export type BudgetOpResult = AdmitResult | ReconcileResult | LedgerResult;

/** "$0.0123": four decimals, as the seed prints it; exact integer rounding half away from zero. */
export function formatUsd4(nano: number): string {
  const neg = nano < 0;
  const units = Math.floor((Math.abs(nano) + 50_000) / 100_000); // 1e-4 USD units
  const whole = Math.floor(units / 10_000);
  const frac = String(units % 10_000).padStart(4, "0");
  return `$${neg && units > 0 ? "-" : ""}${whole}.${frac}`;
}

/** The seed's skip reason, persisted to run_state.error. */
export function budgetSkipReason(remainingNano: number, estimateNano: number): string {
  return `Budget cap reached (${formatUsd4(remainingNano)} remaining < ${formatUsd4(estimateNano)} estimated)`;
}

/** Running counts derived from the open set (never stored, so they cannot drift). */
/** Derived counts carried across one batch, and whether the batch changed the state at all. */
export interface BatchCounts {
  running: number;
  pools: Map<string, number>;
  /** false while every op so far only read (a wait, a skip, a repeat): then nothing needs writing */
  changed: boolean;
}

export function counts(state: BudgetState): BatchCounts {
  const pools = new Map<string, number>();
  let running = 0;
  for (const c of Object.values(state.open)) {
    running++;
    pools.set(c.p, (pools.get(c.p) ?? 0) + 1);
  }
  return { running, pools, changed: false };
}

/**
 * A resubmission may change budget_usd: the difference moves the balance (raising the cap unblocks a run in debt),
 * but the balance is never re-floored to 0 or to the full budget.
 */
function applyBudgetChange(state: BudgetState, budgetNano: number | null, configRev: number): boolean {
  // A replica with a stale config must not move the cap back.
  if (configRev <= (state.configRev ?? 0)) return false;
  state.configRev = configRev;
  if (budgetNano === state.budgetNano) return true;
  if (state.budgetNano !== null && budgetNano !== null) state.remainingNano += budgetNano - state.budgetNano;
  else if (budgetNano !== null)
    state.remainingNano =
      budgetNano - state.historicalBillableNano - state.billableNano - (state.ledgerExtraNano ?? 0);
  state.budgetNano = budgetNano;
  return true;
}

/** Apply one op to `state` in place. `running` carries the derived counts across a batch. */
export function applyOp(state: BudgetState, op: BudgetOp, running: BatchCounts): BudgetOpResult {
  if (op.kind === "admit") return admit(state, op, running);
  if (op.kind === "ledger") return followLedger(state, op, running);
  return reconcile(state, op, running);
}

/**
 * The live budget follows the ledger. Attempts reconcile what they report; spend no attempt reported (judge calls,
 * a task that died without a result, calls the gateway settled for a shim that could not meter them) shows up only
 * in the ledger. Open cells are covered by their reservations, so only closed cells are compared: their billable
 * ledger against what the state accounts for them (historical and reconciled spend, less what open cells' earlier
 * attempts reconciled), and whatever the ledger holds beyond that is deducted. It is recomputed each time, never
 * added up, so spend a later reconcile counts is never counted twice.
 */
function followLedger(state: BudgetState, op: LedgerRequest, running: BatchCounts): LedgerResult {
  let closedLedger = 0;
  for (const [cell, n] of Object.entries(op.byCell)) if (!state.open[cell]) closedLedger += n;
  let openReconciled = 0;
  for (const c of Object.values(state.open)) if (!c.x) openReconciled += c.s ?? 0;
  const accounted = state.historicalBillableNano + state.billableNano - openReconciled;
  const extra = Math.max(0, closedLedger - accounted);
  const prev = state.ledgerExtraNano ?? 0;
  const changed = extra !== prev;
  if (changed) {
    if (state.budgetNano !== null) state.remainingNano -= extra - prev;
    state.ledgerExtraNano = extra;
    running.changed = true;
  }
  return { kind: "ledgered", extraNano: extra, remainingNano: state.remainingNano, changed };
}

function admit(state: BudgetState, op: AdmitRequest, running: BatchCounts): AdmitResult {
  if (applyBudgetChange(state, op.budgetNano, op.configRev)) running.changed = true;
  const held = state.open[op.cellId];
  if (held)
    return { kind: "admitted", reservedNano: held.r, already: true, remainingNano: state.remainingNano };
  if (running.running >= op.parallel) return { kind: "wait" };
  if (op.poolLimit !== undefined && op.poolLimit > 0 && (running.pools.get(op.pool) ?? 0) >= op.poolLimit)
    return { kind: "wait" };
  let reserve = 0;
  // Exempt cells reserve 0 and are never skipped; a run with no cap never skips.
  if (!op.exempt && state.budgetNano !== null) {
    reserve = op.estimateNano;
    // Both halves matter: nothing left at all, or not enough for this cell's own estimate.
    if (state.remainingNano <= 0 || state.remainingNano < reserve)
      return {
        kind: "skipped",
        reason: budgetSkipReason(state.remainingNano, reserve),
        remainingNano: state.remainingNano,
        estimateNano: reserve,
      };
    state.remainingNano -= reserve;
  }
  state.open[op.cellId] = {
    r: reserve,
    p: op.pool,
    x: op.exempt,
    a: [],
    s: 0,
    ...(op.gen !== undefined ? { g: op.gen } : {}),
  };
  running.changed = true;
  running.running++;
  running.pools.set(op.pool, (running.pools.get(op.pool) ?? 0) + 1);
  return { kind: "admitted", reservedNano: reserve, already: false, remainingNano: state.remainingNano };
}

function reconcile(state: BudgetState, op: ReconcileRequest, running: BatchCounts): ReconcileResult {
  const cell = state.open[op.cellId];
  const before = state.remainingNano;
  if (!cell)
    return { kind: "reconciled", applied: false, released: false, remainingNano: before, overspent: false };
  let applied = false;
  if (!cell.a.includes(op.attempt)) {
    applied = true;
    running.changed = true;
    cell.a.push(op.attempt);
    state.totalNano += op.actualNano;
    if (!cell.x) {
      state.billableNano += op.actualNano;
      cell.s = (cell.s ?? 0) + op.actualNano;
      if (state.budgetNano !== null) state.remainingNano -= op.actualNano;
    }
  }
  let released = false;
  if (op.final) {
    // Release: the reservation goes back to the balance; the real spend stays deducted (refund or deduct).
    if (state.budgetNano !== null) state.remainingNano += cell.r;
    delete state.open[op.cellId];
    running.changed = true;
    running.running--;
    running.pools.set(cell.p, (running.pools.get(cell.p) ?? 1) - 1);
    released = true;
  }
  return {
    kind: "reconciled",
    applied,
    released,
    remainingNano: state.remainingNano,
    overspent: state.budgetNano !== null && before >= 0 && state.remainingNano < 0,
  };
}

/**
 * The seed's estimate rules: an exempt cell reserves 0; else the per-attempt cap (`max_cost_usd`) when set; else
 * budget_usd / total cells (the real cell count, not the task count). Integer nano-USD.
 */
export function estimateNanoUsd(config: RunConfig, exempt: boolean, totalCells: number): number {
  if (exempt) return 0;
  if (config.max_cost_usd !== undefined) return nanoToNumber(usdToNano(config.max_cost_usd));
  if (config.budget_usd === undefined || totalCells === 0) return 0;
  // Rounded down: n cells of budget / n must all fit (the seed admits every one of $1 / 3 cells); the real cost is
  // reconciled afterwards, so the estimate need not over-charge.
  return nanoToNumber(usdToNano(config.budget_usd) / BigInt(totalCells));
}
