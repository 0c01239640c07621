/**
 * The one retry loop: bounded, backed off exponentially with jitter, cancellable. Every place that tries again
 * (grading on a broken environment, the judge's model calls, ECS API calls, publishing a task's result, a create
 * racing another process) states its schedule as a `Backoff` and what is worth another try; the loop is here.
 *
 * Jitter is multiplicative and symmetric (× [1 − jitter, 1 + jitter]) so that many replicas failing together do
 * not retry together; tests pass a fixed `random` (0.5 gives the schedule without jitter) and their own `sleep`.
 */
import { setTimeout as sleepFor } from "node:timers/promises";

/** How long to wait before each retry. */
export interface Backoff {
  /** the delay before the first retry */
  baseMs: number;
  /** no delay is longer than this */
  maxMs: number;
  /** growth per retry (default 2) */
  factor?: number;
  /** ± this fraction of each delay, at random (default 0.2; 0 for none) */
  jitter?: number;
}

/** The delay before retry `n` (1 = the first retry): min(maxMs, baseMs · factor^(n−1)), jittered. */
export function backoffDelayMs(b: Backoff, n: number, random: () => number = Math.random): number {
  const plain = Math.min(b.maxMs, b.baseMs * (b.factor ?? 2) ** Math.max(0, n - 1));
  const j = b.jitter ?? 0.2;
  return Math.max(0, Math.round(plain * (1 - j + 2 * j * random())));
}

export interface RetryOptions<T> extends Backoff {
  /** tries in all, the first included (Infinity: until it succeeds or the signal aborts) */
  tries: number;
  /** whether a thrown error is worth another try (default: every error) */
  retryError?: (err: unknown) => boolean;
  /** whether a returned value is a failure worth another try; the last such value is returned when tries run out */
  retryValue?: (value: T) => boolean;
  signal?: AbortSignal;
  /** the wait before retry `n` when the failure itself says (a provider's retry-after); undefined: the backoff */
  delayFor?: (failure: { error?: unknown; value?: T }, n: number) => number | undefined;
  /** told before each wait: what failed, which retry comes next, and after how long */
  onRetry?: (failure: { error?: unknown; value?: T }, retry: number, delayMs: number) => void | Promise<void>;
  /** injectable for tests */
  sleep?: (ms: number, signal?: AbortSignal) => Promise<void>;
  random?: () => number;
}

const defaultSleep = (ms: number, signal?: AbortSignal): Promise<void> =>
  sleepFor(ms, undefined, signal ? { signal } : undefined);

/**
 * Call `fn(attempt)` (attempt 0 first) until it returns a value `retryValue` accepts, throws an error `retryError`
 * refuses (rethrown at once), or the tries run out (the last error is rethrown, or the last value returned). An
 * aborted signal stops the waiting: the abort's reason is thrown.
 */
export async function retry<T>(fn: (attempt: number) => Promise<T>, opts: RetryOptions<T>): Promise<T> {
  const sleep = opts.sleep ?? defaultSleep;
  for (let attempt = 0; ; attempt++) {
    let failure: { error?: unknown; value?: T };
    try {
      const value = await fn(attempt);
      if (!opts.retryValue?.(value)) return value;
      if (attempt + 1 >= opts.tries || opts.signal?.aborted) return value;
      failure = { value };
    } catch (error) {
      if (opts.retryError && !opts.retryError(error)) throw error;
      if (attempt + 1 >= opts.tries || opts.signal?.aborted) throw error;
      failure = { error };
    }
    const delayMs = opts.delayFor?.(failure, attempt + 1) ?? backoffDelayMs(opts, attempt + 1, opts.random);
    await opts.onRetry?.(failure, attempt + 1, delayMs);
    await sleep(delayMs, opts.signal);
  }
}
