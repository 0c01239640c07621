/**
 * A backend wrapped with what every backend needs: the results cache (with in-flight de-duplication)
 * and bounded, backed-off retries of environment failures. Model failures are never retried.
 */
import type { Logger } from "../../../lib/log.js";
import { silentLogger } from "../../../lib/log.js";
import { type Backoff, retry } from "../../../lib/retry.js";
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
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
}

/** The grader's schedule in the shared retry loop's terms: doubling from the base, capped, jittered ±20 %. */
export function graderBackoff(policy: RetryPolicy): Backoff {
  return { baseMs: policy.baseDelayMs, maxMs: policy.maxDelayMs };
}

export function createGrader(backend: GradeBackend, opts: GraderOptions = {}): GradeBackend {
  const policy: RetryPolicy = { ...DEFAULT_RETRY, ...opts.retry };
  const log = opts.logger ?? silentLogger();
  const inFlight = new Map<string, Promise<GradeOutcome>>();

  function gradeWithRetries(job: GradeJob, signal: AbortSignal): Promise<GradeOutcome> {
    return retry(
      async (attempt) => {
        const outcome = redactOutcome(await backend.grade(job, signal));
        if (outcome.kind !== "infra_failure") return outcome;
        log.warn(
          { instance: job.instance.instance_id, attempt: attempt + 1, failure: outcome.failure },
          "grading hit an infrastructure failure",
        );
        return { ...outcome, attempts: attempt + 1 };
      },
      {
        ...graderBackoff(policy),
        tries: policy.maxAttempts,
        retryValue: (o) => o.kind === "infra_failure",
        signal,
        ...(opts.sleep ? { sleep: opts.sleep } : {}),
      },
    );
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
