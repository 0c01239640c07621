/**
 * Reading a provider's rate-limit facts off response headers. Pure functions; the pool applies the result.
 *
 * Anthropic: `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}`, reset an
 * RFC 3339 time. OpenAI: `x-ratelimit-{limit,remaining,reset}-{requests,tokens}`, reset a Go-style duration
 * (`1s`, `6m0s`, `20ms`). Both: `retry-after` in seconds (or an HTTP date), OpenAI also `retry-after-ms`.
 * Everything is returned relative to "now" (durations in ms) so a clock difference between the gateway and the
 * pool's owner never shifts a pause.
 */

export type Dim = "requests" | "inputTokens" | "outputTokens" | "tokens";
export const DIMS: readonly Dim[] = ["requests", "inputTokens", "outputTokens", "tokens"];

export interface DimFacts {
  limitPerMinute?: number;
  remaining?: number;
  resetInMs?: number;
}

export interface RateLimitFacts {
  dims: Partial<Record<Dim, DimFacts>>;
  /** From retry-after / retry-after-ms, when present. */
  retryAfterMs?: number;
}

/** Go-style duration as OpenAI sends it: `6m0s`, `1s`, `20ms`, `1h2m3.5s`, `0.5s`. Undefined when unparseable. */
export function parseDurationMs(text: string): number | undefined {
  const s = text.trim();
  if (s === "") return undefined;
  if (/^\d+(\.\d+)?$/.test(s)) return Math.round(Number(s) * 1000); // bare number: seconds
  const re = /(\d+(?:\.\d+)?)(ms|us|µs|ns|h|m|s)/gy;
  let totalMs = 0;
  let consumed = 0;
  for (let m = re.exec(s); m !== null; m = re.exec(s)) {
    const n = Number(m[1]);
    const unit = m[2];
    const factor =
      unit === "h"
        ? 3_600_000
        : unit === "m"
          ? 60_000
          : unit === "s"
            ? 1000
            : unit === "ms"
              ? 1
              : unit === "ns"
                ? 1e-6
                : 1e-3;
    totalMs += n * factor;
    consumed = re.lastIndex;
  }
  if (consumed !== s.length) return undefined;
  return Math.round(totalMs);
}

/** An RFC 3339 / HTTP date as milliseconds from `nowMs`, never negative. */
export function parseResetTimeMs(text: string, nowMs: number): number | undefined {
  const t = Date.parse(text.trim());
  if (Number.isNaN(t)) return undefined;
  return Math.max(0, t - nowMs);
}

/** `retry-after` is seconds or an HTTP date; `retry-after-ms` is milliseconds and wins when both are present. */
export function parseRetryAfterMs(headers: Record<string, string>, nowMs: number): number | undefined {
  const ms = headers["retry-after-ms"];
  if (ms !== undefined && /^\d+(\.\d+)?$/.test(ms.trim())) return Math.round(Number(ms));
  const ra = headers["retry-after"];
  if (ra === undefined) return undefined;
  if (/^\d+(\.\d+)?$/.test(ra.trim())) return Math.round(Number(ra) * 1000);
  return parseResetTimeMs(ra, nowMs);
}

function num(v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v.trim());
  return Number.isFinite(n) && n >= 0 ? n : undefined;
}

function put(out: Partial<Record<Dim, DimFacts>>, dim: Dim, facts: DimFacts): void {
  const clean: DimFacts = {};
  if (facts.limitPerMinute !== undefined) clean.limitPerMinute = facts.limitPerMinute;
  if (facts.remaining !== undefined) clean.remaining = facts.remaining;
  if (facts.resetInMs !== undefined) clean.resetInMs = facts.resetInMs;
  if (Object.keys(clean).length > 0) out[dim] = clean;
}

const ANTHROPIC: ReadonlyArray<[string, Dim]> = [
  ["requests", "requests"],
  ["input-tokens", "inputTokens"],
  ["output-tokens", "outputTokens"],
  ["tokens", "tokens"],
];

/** Every rate-limit fact the headers carry (keys must be lower-case, as in LimitObservation). */
export function parseRateLimitHeaders(
  headers: Record<string, string>,
  nowMs: number = Date.now(),
): RateLimitFacts {
  const dims: Partial<Record<Dim, DimFacts>> = {};
  for (const [name, dim] of ANTHROPIC) {
    const p = `anthropic-ratelimit-${name}-`;
    const reset = headers[`${p}reset`];
    put(dims, dim, {
      limitPerMinute: num(headers[`${p}limit`]),
      remaining: num(headers[`${p}remaining`]),
      resetInMs: reset === undefined ? undefined : parseResetTimeMs(reset, nowMs),
    });
  }
  // Anthropic's `tokens-*` is the most restrictive of its token limits, not a combined bucket: when the input and
  // output buckets are reported, pacing on it as well would halve the usable rate.
  if (dims.inputTokens || dims.outputTokens) delete dims.tokens;
  for (const [name, dim] of [
    ["requests", "requests"],
    ["tokens", "tokens"],
  ] as const) {
    const reset = headers[`x-ratelimit-reset-${name}`];
    const facts: DimFacts = {
      limitPerMinute: num(headers[`x-ratelimit-limit-${name}`]),
      remaining: num(headers[`x-ratelimit-remaining-${name}`]),
      resetInMs: reset === undefined ? undefined : parseDurationMs(reset),
    };
    put(dims, dim, facts);
  }
  const out: RateLimitFacts = { dims };
  const retryAfterMs = parseRetryAfterMs(headers, nowMs);
  if (retryAfterMs !== undefined) out.retryAfterMs = retryAfterMs;
  return out;
}
