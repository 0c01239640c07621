import type { Clock } from "./clock.js";

/**
 * A token bucket that mirrors an AWS API quota (burst, then a steady refill). `take` reserves tokens first and
 * then waits out any debt, so concurrent callers are served in arrival order and the sum of grants in any window
 * of T seconds never exceeds burst + rate × T — the property the server-side bucket enforces.
 */
export class TokenBucket {
  private tokens: number;
  private last: number;
  /** Total tokens ever granted (for tests and metrics). */
  granted = 0;

  constructor(
    readonly burst: number,
    readonly ratePerSec: number,
    private readonly clock: Clock,
  ) {
    if (burst < 1 || ratePerSec <= 0) throw new RangeError("a bucket needs burst >= 1 and a positive rate");
    this.tokens = burst;
    this.last = clock.now();
  }

  private refill(): void {
    const now = this.clock.now();
    if (now > this.last) {
      this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.ratePerSec);
      this.last = now;
    }
  }

  /** Tokens available right now (may be negative while reservations are outstanding). */
  available(): number {
    this.refill();
    return this.tokens;
  }

  /** Wait until `n` tokens are ours. */
  async take(n = 1, signal?: AbortSignal): Promise<void> {
    if (n > this.burst) throw new RangeError(`cannot take ${n} tokens from a bucket of ${this.burst}`);
    this.refill();
    this.tokens -= n;
    this.granted += n;
    if (this.tokens >= 0) return;
    // Round the wait up to a whole millisecond so the bucket is never observed in debt when the wait ends.
    const waitMs = Math.ceil((-this.tokens / this.ratePerSec) * 1000);
    try {
      await this.clock.sleep(waitMs, signal);
    } catch (err) {
      this.tokens += n;
      this.granted -= n;
      throw err;
    }
  }
}

/** The ECS quotas that bind a launch (per account and region). */
export interface EcsQuotas {
  /** Fargate task launches: burst, then per second. */
  launchBurst: number;
  launchPerSec: number;
  /** RunTask + StopTask share one API bucket. */
  apiBurst: number;
  apiPerSec: number;
  /** DescribeTasks / ListTasks have their own bucket. */
  describeBurst: number;
  describePerSec: number;
}

export const DEFAULT_ECS_QUOTAS: EcsQuotas = {
  launchBurst: 100,
  launchPerSec: 20,
  apiBurst: 100,
  apiPerSec: 40,
  describeBurst: 50,
  describePerSec: 20,
};
