/** The server side of an AWS quota: a token bucket that refuses (ThrottlingException) instead of waiting. */
export class QuotaBucket {
  private tokens: number;
  private last: number;
  /** Calls refused for want of tokens (reported in the rehearsal's figures). */
  refused = 0;

  constructor(
    readonly burst: number,
    readonly ratePerSec: number,
    private readonly now: () => number = Date.now,
  ) {
    this.tokens = burst;
    this.last = now();
  }

  /** Take `n` tokens if all are there; false (nothing taken) otherwise. */
  tryTake(n = 1): boolean {
    const t = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((t - this.last) / 1000) * this.ratePerSec);
    this.last = t;
    if (this.tokens + 1e-9 < n) {
      this.refused++;
      return false;
    }
    this.tokens -= n;
    return true;
  }
}

/** The ECS quotas of one account and region that the emulator enforces (WIRE-FACTS: AWS). */
export interface EcsServerQuotas {
  /** Fargate task launches: burst, then per second. */
  launchBurst: number;
  launchPerSec: number;
  /** RunTask and StopTask share one API bucket. */
  apiBurst: number;
  apiPerSec: number;
  /** DescribeTasks and ListTasks. */
  describeBurst: number;
  describePerSec: number;
  /** Tasks one RunTask may start. */
  maxPerRunTask: number;
  /** Tasks one DescribeTasks may name. */
  maxPerDescribe: number;
  /** Bytes of one RunTask's overrides. */
  maxOverridesBytes: number;
}

export const ECS_SERVER_QUOTAS: EcsServerQuotas = {
  launchBurst: 100,
  launchPerSec: 20,
  apiBurst: 100,
  apiPerSec: 40,
  describeBurst: 50,
  describePerSec: 20,
  maxPerRunTask: 10,
  maxPerDescribe: 100,
  maxOverridesBytes: 8192,
};
