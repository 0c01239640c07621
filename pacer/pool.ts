import type { ActualUsage } from "../protocol/pacer.js";
import type { PoolStatsSnapshot } from "../protocol/state.js";
import { type Cost, chargedInputTokens, type PoolBucket } from "./bucket.js";
import type { RateLimitFacts } from "./headers.js";

export type { PoolStatsSnapshot } from "../protocol/state.js";

/** A caller waiting for admission. `grant` is called exactly once, in FIFO order. */
export interface Waiter {
  id: string;
  cost: Cost;
  enqueuedMs: number;
  grant(waitedMs: number): void;
  /** The pool is changing owner: the waiter must ask the new one (fleet pacer only). */
  handOff?(): void;
}

/** What the pool has seen settle: the planner's fleet sizing and the shim's output estimate read it. */

const RING = 500;

/**
 * A pool: its bucket, a strict FIFO of waiters (a large request at the head is never overtaken, so it cannot
 * starve), one timer to the moment the head fits, and the settle statistics.
 */
export class Pool {
  private queue: Waiter[] = [];
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private settled = 0;
  private inSum = 0;
  private outSum = 0;
  private readonly outRing: number[] = [];

  constructor(
    public bucket: PoolBucket,
    private readonly now: () => number,
    private readonly random: () => number = Math.random,
  ) {}

  get waiting(): number {
    return this.queue.length;
  }

  enqueue(w: Waiter): void {
    this.queue.push(w);
    if (this.queue.length === 1) this.pump();
  }

  /** Remove a waiter that gave up; false when it is not queued (already granted, or unknown). */
  cancel(id: string): boolean {
    const i = this.queue.findIndex((w) => w.id === id);
    if (i < 0) return false;
    this.queue.splice(i, 1);
    if (i === 0) this.pump();
    return true;
  }

  /** Everyone still waiting, removed: the owner hands them on when it steps down. */
  takeAll(): Waiter[] {
    const all = this.queue;
    this.queue = [];
    this.clearTimer();
    return all;
  }

  /** The call used other than estimated (delta may be negative) or failed (refund = the whole estimate back). */
  adjust(delta: Cost): void {
    this.bucket.adjust(delta, this.now());
    this.pump();
  }

  settleStats(estimate: Cost, actual: ActualUsage): Cost {
    this.settled++;
    this.inSum += actual.inputTokens + actual.cacheReadTokens;
    this.outSum += actual.outputTokens;
    if (this.outRing.length >= RING) this.outRing.shift();
    this.outRing.push(actual.outputTokens);
    return {
      requests: 0,
      inputTokens: estimate.inputTokens - chargedInputTokens(this.bucket.cfg, actual),
      outputTokens: estimate.outputTokens - actual.outputTokens,
    };
  }

  stats(): PoolStatsSnapshot {
    const sorted = [...this.outRing].sort((a, b) => a - b);
    const p95 =
      sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.95))]!;
    return {
      settledCalls: this.settled,
      inputTokens: this.inSum,
      outputTokens: this.outSum,
      outputTokensP95: p95,
    };
  }

  observe(status: number, facts: RateLimitFacts): void {
    this.bucket.observe(status, facts, this.now(), this.random);
    this.pump();
  }

  /** Grant every head that fits now, then sleep until the next one could. */
  pump(): void {
    this.clearTimer();
    if (this.closed) return;
    while (this.queue.length > 0) {
      const w = this.queue[0]!;
      const nowMs = this.now();
      const waitMs = this.bucket.tryTake(w.cost, nowMs);
      if (waitMs > 0) {
        this.timer = setTimeout(() => this.pump(), Math.max(1, Math.ceil(waitMs)));
        return;
      }
      this.queue.shift();
      w.grant(nowMs - w.enqueuedMs);
    }
  }

  close(): void {
    this.closed = true;
    this.clearTimer();
  }

  private clearTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
