import { type KV, KvWatchInclude } from "@nats-io/kv";
import { TypedKv } from "../../plane/kv.js";
import { type RunConfig, RunConfigSchema } from "../../protocol/config.js";
import { ErrorCode, RetryableError } from "../../protocol/errors.js";
import { RunProgressSchema } from "../../protocol/messages.js";
import { nanoToNumber, usdToNano } from "../../protocol/money.js";
import { ProgressKeys, StateKeys } from "../../protocol/subjects.js";
import type { Db } from "../../store/db.js";
import { countCells, getBillableCost } from "../../store/results.js";
import { getRunSpend } from "../../store/writer.js";
import { estimateNanoUsd } from "./budget.js";

/** What the dispatcher needs to know about a run to admit its cells. */
export interface RunContext {
  config: RunConfig;
  /** the config's revision in the jobs bucket (newer submissions have higher ones) */
  configRev: number;
  totalCells: number;
  budgetNano: number | null;
  /** fleet size per pool when the planner (or the scaler) published one */
  poolLimits: Record<string, number>;
  estimate(exempt: boolean): number;
}

/**
 * Run facts, cached for a few seconds per process: the run's config as the planner wrote it to the `jobs` bucket
 * (a resubmission rewrites it, so the cache expires), the real cell count from run_state (the seed's estimate
 * divides by it), and per-pool fleet sizes from the run's progress key.
 */
export class RunCache {
  private readonly cache = new Map<string, { at: number; ctx: Promise<RunContext> }>();

  constructor(
    private readonly jobs: KV,
    private readonly progress: KV,
    private readonly db: Db,
    private readonly ttlMs = 5_000,
  ) {}

  get(run: string): Promise<RunContext> {
    const hit = this.cache.get(run);
    if (hit && Date.now() - hit.at < this.ttlMs) return hit.ctx;
    const ctx = this.load(run);
    this.cache.set(run, { at: Date.now(), ctx });
    ctx.catch(() => this.cache.delete(run));
    return ctx;
  }

  /** The seed for a run's budget state: its cap and the billable spend already in the DB. */
  async seed(
    run: string,
  ): Promise<{ budgetNano: number | null; historicalBillableNano: number; configRev: number }> {
    const ctx = await this.get(run);
    return {
      budgetNano: ctx.budgetNano,
      historicalBillableNano: await historicalBillable(this.db, run),
      configRev: ctx.configRev,
    };
  }

  /** Forget cached runs whenever a run config is (re)written, so a resubmission's budget applies at once. */
  async watch(): Promise<{ stop(): void }> {
    const w = await this.jobs.watch({ key: "run.>", include: KvWatchInclude.UpdatesOnly });
    void (async () => {
      for await (const _ of w) this.cache.clear();
    })().catch(() => {});
    return w;
  }

  private async load(run: string): Promise<RunContext> {
    const e = await new TypedKv(this.jobs, RunConfigSchema, "run config").get(StateKeys.jobRun(run));
    if (!e) throw new RetryableError(ErrorCode.NotFound, `run ${run} has no config in the jobs bucket yet`);
    const config = e.value;
    const totalCells = await countCells(this.db, run);
    const poolLimits: Record<string, number> = {};
    const prog = await new TypedKv(this.progress, RunProgressSchema, "run progress")
      .get(ProgressKeys.run(run))
      .catch(() => null);
    for (const [pool, v] of Object.entries(prog?.value.pools ?? {}))
      if (v.fleetSize > 0) poolLimits[pool] = v.fleetSize;
    const budgetNano = config.budget_usd === undefined ? null : nanoToNumber(usdToNano(config.budget_usd));
    return {
      config,
      configRev: e.revision,
      totalCells,
      budgetNano,
      poolLimits,
      estimate: (exempt) => estimateNanoUsd(config, exempt, totalCells),
    };
  }
}

/**
 * A run's billable spend already in the DB: the seed's figure (total_cost of non-subscription rows), or the ledger's
 * (every call of non-exempt cells, voided retries included: that money was spent), whichever is larger — an
 * over-charge is safe, an under-charge is not.
 */
export async function historicalBillable(db: Db, run: string): Promise<number> {
  const [rows, ledger] = await Promise.all([getBillableCost(db, run), getRunSpend(db, run)]);
  return Math.max(rows, ledger.billableNanoUsd);
}
