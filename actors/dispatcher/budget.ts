/**
 * The seed's reserve → execute → reconcile, as pure functions over one run's budget state. The state lives in the
 * `budgets` KV bucket and every change is a compare-and-set (see book.ts), so any number of dispatcher replicas
 * share one balance without a process lock.
 */

/** A cell that holds a reservation (and a capacity slot) until its final outcome. */
export interface OpenCell {
  /** reserved nano-USD (0 for exempt cells) */
  r: number;
  /** pool, for per-pool fleet limits */
  p: string;
  /** budget-exempt: its actual spend never reduces the balance */
  x: boolean;
  /** attempts whose actual cost was already applied (reconcile is idempotent per attempt) */
  a: number[];
}

export interface BudgetState {
  v: 1;
  run: string;
  /** the cap; null when the run sets no budget_usd (nothing is ever skipped) */
  budgetNano: number | null;
  /** may go negative: overspend is a debt that is never re-floored */
  remainingNano: number;
  /** billable spend already in the results DB when this state was created (a resumed run's debt) */
  historicalBillableNano: number;
  /** actual spend reconciled since creation: all cells, and the non-exempt part */
  totalNano: number;
  billableNano: number;
  open: Record<string, OpenCell>;
  /** revision of the run config (jobs bucket) the cap came from: an older config never moves it back */
  configRev: number;
  createdAt: string;
}

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

export type BudgetOp = AdmitRequest | ReconcileRequest;
export type BudgetOpResult = AdmitResult | ReconcileResult;

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
    state.remainingNano = budgetNano - state.historicalBillableNano - state.billableNano;
  state.budgetNano = budgetNano;
  return true;
}

/** Apply one op to `state` in place. `running` carries the derived counts across a batch. */
export function applyOp(state: BudgetState, op: BudgetOp, running: BatchCounts): BudgetOpResult {
  if (op.kind === "admit") return admit(state, op, running);
  return reconcile(state, op, running);
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
  state.open[op.cellId] = { r: reserve, p: op.pool, x: op.exempt, a: [] };
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
