import type { BucketCheckpoint, PoolLimits } from "../protocol/state.js";
import { DIMS, type Dim, type RateLimitFacts } from "./headers.js";

export type { BucketCheckpoint, PoolLimits } from "../protocol/state.js";

/**
 * One pool's token buckets: requests, input tokens, output tokens and (OpenAI's combined) tokens per minute, each
 * replenished continuously at limit/60 000 per ms like the providers' own. Pure: time and randomness come in as
 * arguments, so LocalPacer, the fleet owner and the unit tests all run exactly this arithmetic.
 */

export interface PoolConfig {
  limits: PoolLimits;
  /**
   * Bucket capacity in ms of refill (default 1000). Providers allow a full minute of burst; pacing with a short
   * burst keeps the fleet's rate smooth, so a 429 from someone else's traffic on the same key costs little.
   */
  burstMs?: number;
  /** Fraction of a discovered limit to pace at (default 1). */
  utilization?: number;
  /** Weight of cache-read tokens toward input tokens per minute: 0 for Anthropic (the default), 1 for OpenAI. */
  cacheReadInputWeight?: number;
  /** Weight of cache-write tokens toward input tokens per minute (default 1). */
  cacheWriteInputWeight?: number;
  /** 529 back-off: first pause and ceiling, jittered ±50% (defaults 1000 / 30 000). */
  overloadBaseMs?: number;
  overloadMaxMs?: number;
  /** Pause after a 429 that carries neither retry-after nor a reset (default 1000). */
  default429PauseMs?: number;
}

export interface Cost {
  requests: number;
  inputTokens: number;
  outputTokens: number;
}

const LIMIT_KEY: Record<Dim, keyof PoolLimits> = {
  requests: "requestsPerMinute",
  inputTokens: "inputTokensPerMinute",
  outputTokens: "outputTokensPerMinute",
  tokens: "tokensPerMinute",
};

function amount(cost: Cost, dim: Dim): number {
  return dim === "tokens" ? cost.inputTokens + cost.outputTokens : cost[dim];
}

/** The checkpoint an owner writes to KV and a successor restores: limits and pause, not the level (see restore). */

export class PoolBucket {
  readonly cfg: PoolConfig;
  private readonly limits: PoolLimits;
  private readonly level: Partial<Record<Dim, number>> = {};
  private lastMs: number;
  private pausedUntilMs = 0;
  private overloadStreak = 0;

  /**
   * A pool starts EMPTY and fills at its rate: the provider key may already be in use (another run, a previous
   * owner), and one burst forgone at the start of a run costs nothing measurable. `full` is for tests.
   */
  constructor(cfg: PoolConfig, nowMs: number, full = false) {
    this.cfg = cfg;
    this.limits = { ...cfg.limits };
    this.lastMs = nowMs;
    for (const d of DIMS) if (this.rate(d) !== undefined) this.level[d] = full ? this.capacity(d) : 0;
  }

  /** Tokens per ms for a dimension, or undefined when it is not paced. */
  rate(dim: Dim): number | undefined {
    const perMin = this.limits[LIMIT_KEY[dim]];
    if (perMin === undefined || !(perMin > 0)) return undefined;
    return (perMin * (this.cfg.utilization ?? 1)) / 60_000;
  }

  capacity(dim: Dim): number {
    return (this.rate(dim) ?? 0) * (this.cfg.burstMs ?? 1000);
  }

  currentLimits(): PoolLimits {
    return { ...this.limits };
  }

  levels(nowMs: number): Partial<Record<Dim, number>> {
    this.refill(nowMs);
    return { ...this.level };
  }

  pausedForMs(nowMs: number): number {
    return Math.max(0, this.pausedUntilMs - nowMs);
  }

  private refill(nowMs: number): void {
    const dt = nowMs - this.lastMs;
    if (dt <= 0) return;
    this.lastMs = nowMs;
    for (const d of DIMS) {
      const r = this.rate(d);
      const l = this.level[d];
      if (r === undefined || l === undefined) continue;
      this.level[d] = Math.min(this.capacity(d), l + r * dt);
    }
  }

  /**
   * Take `cost` if every paced bucket holds at least min(cost, capacity) — a call larger than the burst is let
   * through from a full bucket and leaves it in debt, so it is never starved. Returns 0 when taken, else how many
   * ms until it could be.
   */
  tryTake(cost: Cost, nowMs: number): number {
    this.refill(nowMs);
    const pausedMs = this.pausedForMs(nowMs);
    if (pausedMs > 0) return pausedMs;
    let waitMs = 0;
    for (const d of DIMS) {
      const r = this.rate(d);
      const l = this.level[d];
      if (r === undefined || l === undefined) continue;
      const need = Math.min(amount(cost, d), this.capacity(d));
      if (l < need) waitMs = Math.max(waitMs, (need - l) / r);
    }
    if (waitMs > 0) return Math.max(waitMs, 0.001);
    for (const d of DIMS) {
      const l = this.level[d];
      if (l !== undefined) this.level[d] = l - amount(cost, d);
    }
    return 0;
  }

  /** Add (refund) or remove (a settle that used more than estimated) tokens; capped at capacity. */
  adjust(delta: Cost, nowMs: number): void {
    this.refill(nowMs);
    for (const d of DIMS) {
      const l = this.level[d];
      if (l !== undefined) this.level[d] = Math.min(this.capacity(d), l + amount(delta, d));
    }
  }

  /**
   * Apply a response's rate-limit facts. A discovered limit replaces the configured one; a `remaining` below our
   * level means someone else draws on the same key, so our level drops to it. A 429 empties the buckets and pauses
   * until retry-after (or the reset); a 529 is provider-wide overload: back off with jitter, limits untouched.
   */
  observe(status: number, facts: RateLimitFacts, nowMs: number, random: () => number = Math.random): void {
    this.refill(nowMs);
    for (const d of DIMS) {
      const f = facts.dims[d];
      if (!f) continue;
      if (f.limitPerMinute !== undefined && f.limitPerMinute > 0) this.setLimit(d, f.limitPerMinute);
      const l = this.level[d];
      if (f.remaining !== undefined && l !== undefined && f.remaining < l) this.level[d] = f.remaining;
    }
    if (status === 429) {
      let pauseMs = facts.retryAfterMs;
      if (pauseMs === undefined) {
        const resets = DIMS.map((d) => facts.dims[d]?.resetInMs).filter((x): x is number => x !== undefined);
        pauseMs = resets.length > 0 ? Math.min(...resets) : (this.cfg.default429PauseMs ?? 1000);
      }
      for (const d of DIMS) {
        const l = this.level[d];
        if (l !== undefined) this.level[d] = Math.min(l, 0);
      }
      this.pauseUntil(nowMs + pauseMs);
    } else if (status === 529) {
      this.overloadStreak++;
      const base = this.cfg.overloadBaseMs ?? 1000;
      const ceiling = this.cfg.overloadMaxMs ?? 30_000;
      const backoffMs = Math.min(ceiling, base * 2 ** (this.overloadStreak - 1)) * (0.5 + random());
      this.pauseUntil(nowMs + backoffMs);
    } else if (status >= 200 && status < 300) {
      this.overloadStreak = 0;
    }
  }

  private pauseUntil(untilMs: number): void {
    this.pausedUntilMs = Math.max(this.pausedUntilMs, untilMs);
  }

  private setLimit(d: Dim, perMinute: number): void {
    const had = this.rate(d) !== undefined;
    this.limits[LIMIT_KEY[d]] = perMinute;
    if (!had) this.level[d] = 0; // a newly discovered bucket starts empty: safe, fills within burstMs
    const l = this.level[d];
    if (l !== undefined) this.level[d] = Math.min(l, this.capacity(d));
  }

  checkpoint(nowMs: number, wallNowMs: number): BucketCheckpoint {
    const pausedForMs = this.pausedForMs(nowMs);
    return {
      limits: this.currentLimits(),
      pausedUntilWallMs: pausedForMs > 0 ? wallNowMs + pausedForMs : 0,
      overloadStreak: this.overloadStreak,
    };
  }

  /**
   * A successor's bucket from the last checkpoint. It starts empty: the previous owner may have admitted up to a
   * full burst just before it died, and starting empty is the one choice that can never exceed the provider's
   * bucket. The rate itself is back at once — only one burst of headroom is forgone.
   */
  static restore(cfg: PoolConfig, cp: BucketCheckpoint, nowMs: number, wallNowMs: number): PoolBucket {
    const b = new PoolBucket({ ...cfg, limits: { ...cfg.limits, ...cp.limits } }, nowMs, false);
    if (cp.pausedUntilWallMs > wallNowMs) b.pausedUntilMs = nowMs + (cp.pausedUntilWallMs - wallNowMs);
    b.overloadStreak = cp.overloadStreak;
    return b;
  }
}

/**
 * Input tokens an actual usage charges to the pool. ActualUsage.inputTokens is the input EXCLUDING cache reads
 * (uncached input plus cache writes) — what the shim passes (providers/ total input minus cacheReadTokens) — so
 * cache reads are added back at their rate-limit weight: 0 for Anthropic (they do not count toward input tokens per
 * minute), 1 for OpenAI (cached prompt tokens still count toward TPM).
 */
export function chargedInputTokens(
  cfg: PoolConfig,
  u: { inputTokens: number; cacheReadTokens: number; cacheWriteTokens: number },
): number {
  const readCharge = u.cacheReadTokens * (cfg.cacheReadInputWeight ?? 0);
  const writeDiscount = u.cacheWriteTokens * (1 - (cfg.cacheWriteInputWeight ?? 1));
  return Math.max(0, u.inputTokens + readCharge - writeDiscount);
}
