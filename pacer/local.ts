import { performance } from "node:perf_hooks";
import type { ActualUsage, Admission, AdmissionRequest, LimitObservation, Pacer } from "../protocol/pacer.js";
import { type Cost, PoolBucket, type PoolConfig } from "./bucket.js";
import { parseRateLimitHeaders } from "./headers.js";
import { Pool, type PoolStatsSnapshot } from "./pool.js";

export interface PacerPools {
  /** Per-pool configuration (limits per minute, burst, cache weights). */
  pools?: Record<string, PoolConfig>;
  /** For pools not listed: default no limits, so the pool is paced only once limits are discovered. */
  defaults?: PoolConfig;
}

export function poolConfig(cfg: PacerPools, pool: string): PoolConfig {
  return cfg.pools?.[pool] ?? cfg.defaults ?? { limits: {} };
}

export function estimateCost(req: AdmissionRequest): Cost {
  return {
    requests: 1,
    inputTokens: Math.max(0, req.inputTokens),
    outputTokens: Math.max(0, req.outputTokens),
  };
}

export function abortError(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("admission aborted", "AbortError");
}

let seq = 0;

/**
 * The pacer for one process: the same bucket arithmetic as the fleet pacer with no NATS. For tests, the local
 * launcher with a single shim, and as the bucket the fleet pacer's owner runs.
 */
export class LocalPacer implements Pacer {
  private readonly pools = new Map<string, Pool>();
  private readonly now: () => number;
  private readonly random: () => number;

  constructor(
    private readonly cfg: PacerPools = {},
    opts: { now?: () => number; random?: () => number } = {},
  ) {
    this.now = opts.now ?? (() => performance.now());
    this.random = opts.random ?? Math.random;
  }

  pool(name: string): Pool {
    let p = this.pools.get(name);
    if (!p) {
      p = new Pool(new PoolBucket(poolConfig(this.cfg, name), this.now()), this.now, this.random);
      this.pools.set(name, p);
    }
    return p;
  }

  admit(req: AdmissionRequest, signal?: AbortSignal): Promise<Admission> {
    const pool = this.pool(req.pool);
    const cost = estimateCost(req);
    const id = `l${++seq}`;
    return new Promise<Admission>((resolve, reject) => {
      if (signal?.aborted) return reject(abortError(signal));
      const onAbort = () => {
        if (pool.cancel(id)) reject(abortError(signal!));
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      pool.enqueue({
        id,
        cost,
        enqueuedMs: this.now(),
        grant: (waitedMs) => {
          signal?.removeEventListener("abort", onAbort);
          resolve(localAdmission(pool, cost, Math.round(waitedMs)));
        },
      });
    });
  }

  observe(obs: LimitObservation): void {
    this.pool(obs.pool).observe(obs.status, parseRateLimitHeaders(obs.headers));
  }

  stats(pool: string): PoolStatsSnapshot {
    return this.pool(pool).stats();
  }

  async close(): Promise<void> {
    for (const p of this.pools.values()) p.close();
  }
}

function localAdmission(pool: Pool, cost: Cost, waitedMs: number): Admission {
  let done = false;
  return {
    waitedMs,
    settle(actual: ActualUsage) {
      if (done) return;
      done = true;
      pool.adjust(pool.settleStats(cost, actual));
    },
    refund() {
      if (done) return;
      done = true;
      pool.adjust(cost);
    },
  };
}
