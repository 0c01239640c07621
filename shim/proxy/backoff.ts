import type { RetryPolicy } from "./context.js";

/**
 * How long to wait before retry `n` (0-based): the provider's retry-after / retry-after-ms when given, else
 * exponential backoff with jitter.
 */
export function backoffMs(
  policy: RetryPolicy,
  n: number,
  headers: Record<string, string | string[] | undefined>,
): number {
  const ms = header(headers, "retry-after-ms");
  if (ms !== undefined) {
    const v = Number(ms);
    if (Number.isFinite(v) && v >= 0) return Math.min(v, policy.maxRetryAfterMs);
  }
  const ra = header(headers, "retry-after");
  if (ra !== undefined) {
    const secs = Number(ra);
    if (Number.isFinite(secs) && secs >= 0) return Math.min(secs * 1000, policy.maxRetryAfterMs);
    const at = Date.parse(ra);
    if (Number.isFinite(at)) return Math.min(Math.max(0, at - Date.now()), policy.maxRetryAfterMs);
  }
  const exp = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** n);
  return Math.round(exp / 2 + Math.random() * (exp / 2));
}

function header(h: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
}

/** Sleep, ending early (false) when the signal aborts. */
export function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const t = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      resolve(false);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
