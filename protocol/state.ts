/**
 * What the KV buckets hold besides messages: the schema of every value a process reads back (plane/kv.ts decodes
 * through these, so a value written by another version or by hand is an error that names its key, never a cast).
 * Keys are built in subjects.ts (`StateKeys`, `ProgressKeys`).
 */
import { z } from "zod";

const count = z.number().int().nonnegative();
const nano = z.number().int();

// ---- budgets: run.<run> ------------------------------------------------------------------------------------------

/** A cell that holds a reservation (and a capacity slot) until its final outcome. Short names: 20,000 per run. */
export const OpenCellSchema = z.object({
  /** reserved nano-USD (0 for exempt cells) */
  r: nano,
  /** pool, for per-pool fleet limits */
  p: z.string(),
  /** budget-exempt: its actual spend never reduces the balance */
  x: z.boolean(),
  /** attempts whose actual cost was already applied (reconcile is idempotent per attempt) */
  a: z.array(count),
  /** the billable part of that cost (earlier attempts of a cell still open), so the ledger follower can leave it out */
  s: nano.default(0),
  /** the cell message (stream sequence) that admitted it: which submission of the cell holds the reservation */
  g: count.optional(),
});
export type OpenCell = z.output<typeof OpenCellSchema>;

/** One run's budget: the seed's reserve → execute → reconcile state, changed only by compare-and-set. */
export const BudgetStateSchema = z.object({
  v: z.literal(1),
  run: z.string(),
  /** the cap; null when the run sets no budget_usd (nothing is ever skipped) */
  budgetNano: nano.nullable(),
  /** may go negative: overspend is a debt that is never re-floored */
  remainingNano: nano,
  /** billable spend already in the results DB when this state was created (a resumed run's debt) */
  historicalBillableNano: nano,
  /** actual spend reconciled since creation: all cells, and the non-exempt part */
  totalNano: nano,
  billableNano: nano,
  /**
   * billable spend the ledger holds for closed cells beyond what their attempts reported: calls no attempt reported
   * (the judge's, a task's that died without a result, the gateway's settled ones). Recomputed from the ledger, never
   * accumulated (dispatcher/budget.ts followLedger).
   */
  ledgerExtraNano: nano.default(0),
  open: z.record(z.string(), OpenCellSchema),
  /** revision of the run config (jobs bucket) the cap came from: an older config never moves it back */
  configRev: count,
  createdAt: z.string(),
});
export type BudgetState = z.output<typeof BudgetStateSchema>;

// ---- budgets: claim.<run>.<cell>.<attempt>, cell.<run>.<cell> -----------------------------------------------------

/** One attempt's claim: created once (a second create fails), so no attempt is ever launched twice. */
export const ClaimSchema = z.object({
  by: z.string(),
  /** the cell message (stream sequence) whose generation this attempt belongs to */
  gen: count,
  /** first attempt of the generation: retries count from it */
  base: count,
  pool: z.string(),
  at: z.string(),
  handle: z.string().optional(),
  backend: z.string().optional(),
  launchedAt: z.string().optional(),
});
export type Claim = z.output<typeof ClaimSchema>;

/**
 * Per cell: the generation and attempt launched last. Whether that generation is over is not written here (a KV write
 * per cell): it is over once its reservation is released, i.e. the budget state holds no open entry of that
 * generation for the cell (`submissionOver`).
 */
export const CellLaunchSchema = z.object({
  gen: count,
  base: count,
  latest: count,
  at: z.string(),
});
export type CellLaunch = z.output<typeof CellLaunchSchema>;

// ---- pacer: pool.<pool> ------------------------------------------------------------------------------------------

/** Provider rate limits of one pool, per minute; a dimension not limited is absent. */
export const PoolLimitsSchema = z
  .object({
    requestsPerMinute: z.number().positive(),
    inputTokensPerMinute: z.number().positive(),
    outputTokensPerMinute: z.number().positive(),
    tokensPerMinute: z.number().positive(),
  })
  .partial();
export type PoolLimits = z.output<typeof PoolLimitsSchema>;

/** What a pool's owner checkpoints so a successor resumes its pacing. */
export const BucketCheckpointSchema = z.object({
  limits: PoolLimitsSchema,
  /** wall-clock end of a 429 pause or 529 back-off, 0 when none */
  pausedUntilWallMs: z.number().nonnegative(),
  overloadStreak: count,
});
export type BucketCheckpoint = z.output<typeof BucketCheckpointSchema>;

export const PoolStatsSnapshotSchema = z.object({
  settledCalls: count,
  inputTokens: z.number().nonnegative(),
  outputTokens: z.number().nonnegative(),
  /** p95 of output tokens over the last 500 settled calls, 0 before any */
  outputTokensP95: z.number().nonnegative(),
});
export type PoolStatsSnapshot = z.output<typeof PoolStatsSnapshotSchema>;

/** A pool's owner lease and checkpoint (one owner per pool paces the whole fleet). */
export const PacerOwnerSchema = z.object({
  v: z.literal(1),
  owner: z.string().nullable(),
  inbox: z.string().nullable(),
  heartbeatWallMs: z.number().nonnegative(),
  checkpoint: BucketCheckpointSchema,
  stats: PoolStatsSnapshotSchema,
});
export type PacerOwnerRecord = z.output<typeof PacerOwnerSchema>;

// ---- progress: pool.<run>.<pool> ---------------------------------------------------------------------------------

/** A pool's fleet size as the planner last computed it (read by the dashboard, `status` and the resizer). */
export const PoolSizeRecordSchema = z.object({
  run: z.string(),
  pool: z.string(),
  /** attempts to run at once; null: no cap (no limits known) */
  fleetSize: count.nullable(),
  /** every figure the size came from (limits, per-call tokens and latency, pending attempts) */
  inputs: z.record(z.string(), z.number()),
  /** where the per-call figures came from */
  source: z.string(),
  /** the limit that sets the size */
  binding: z.string(),
  reason: z.string(),
  updatedAt: z.string(),
});
export type PoolSizeRecord = z.output<typeof PoolSizeRecordSchema>;
