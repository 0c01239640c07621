/**
 * A backend wrapped with what every backend needs: the results cache (with in-flight de-duplication)
 * and bounded, backed-off retries of environment failures. Model failures are never retried.
 */
import { setTimeout as delay } from "node:timers/promises";
import type { Logger } from "../../../protocol/log.js";
import { silentLogger } from "../../../protocol/log.js";
import { type GradeCache, gradeCacheKey } from "./cache.js";
import { type GradeBackend, type GradeJob, type GradeOutcome, redactOutcome } from "./types.js";

export interface RetryPolicy {
  /** Total attempts including the first. */
  maxAttempts: number;
  baseDelayMs: number;
  maxDelayMs: number;
}

export const DEFAULT_RETRY: RetryPolicy = { maxAttempts: 3, baseDelayMs: 5_000, maxDelayMs: 60_000 };

export interface GraderOptions {
  retry?: Partial<RetryPolicy>;
  cache?: GradeCache;
  logger?: Logger;
  /** Injectable for tests. */
  sleep?: (ms: number, signal: AbortSignal) => Promise<void>;
}

/** Exponential backoff: base, 2·base, 4·base… capped. Deterministic so schedules are testable. */
export function backoffMs(policy: RetryPolicy, failedAttempts: number): number {
  return Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** (failedAttempts - 1));
}

export function createGrader(backend: GradeBackend, opts: GraderOptions = {}): GradeBackend {
  const policy: RetryPolicy = { ...DEFAULT_RETRY, ...opts.retry };
  const log = opts.logger ?? silentLogger();
  const sleep = opts.sleep ?? ((ms: number, signal: AbortSignal) => delay(ms, undefined, { signal }));
  const inFlight = new Map<string, Promise<GradeOutcome>>();

  async function gradeWithRetries(job: GradeJob, signal: AbortSignal): Promise<GradeOutcome> {
    for (let attempt = 1; ; attempt++) {
      const outcome = redactOutcome(await backend.grade(job, signal));
      if (outcome.kind !== "infra_failure") return outcome;
      const failed = { ...outcome, attempts: attempt };
      log.warn(
        { instance: job.instance.instance_id, attempt, failure: outcome.failure },
        "grading hit an infrastructure failure",
      );
      if (attempt >= policy.maxAttempts || signal.aborted) return failed;
      await sleep(backoffMs(policy, attempt), signal);
    }
  }

  return {
    name: backend.name,
    async grade(job, signal) {
      const digest = job.image?.digest;
      if (!opts.cache || !digest) return gradeWithRetries(job, signal);
      const cache = opts.cache;
      const key = gradeCacheKey(digest, job.patch);
      const hit = await cache.get(key);
      if (hit) return { ...hit, cached: true };
      const pending = inFlight.get(key);
      if (pending) return pending;
      const work = (async () => {
        const outcome = await gradeWithRetries(job, signal);
        // Skipped empty patches cost nothing and depend on the job's emptyPatch mode: not worth a key.
        const skippedEmpty = outcome.kind === "not_graded" && outcome.reason === "empty_patch";
        if (outcome.kind !== "infra_failure" && !skippedEmpty) await cache.set(key, outcome);
        return outcome;
      })();
      inFlight.set(key, work);
      try {
        return await work;
      } finally {
        inFlight.delete(key);
      }
    },
  };
}
