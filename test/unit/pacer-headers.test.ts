import assert from "node:assert/strict";
import { test } from "node:test";
import { parseDurationMs, parseRateLimitHeaders, parseRetryAfterMs } from "../../pacer/headers.js";

test("OpenAI durations: 6m0s, 1s, 20ms, 1h2m3.5s, bare seconds; garbage is undefined", () => {
  assert.equal(parseDurationMs("6m0s"), 360_000);
  assert.equal(parseDurationMs("1s"), 1000);
  assert.equal(parseDurationMs("20ms"), 20);
  assert.equal(parseDurationMs("1h2m3.5s"), 3_723_500);
  assert.equal(parseDurationMs("0.5s"), 500);
  assert.equal(parseDurationMs("2"), 2000);
  assert.equal(parseDurationMs("soon"), undefined);
  assert.equal(parseDurationMs("5x"), undefined);
  assert.equal(parseDurationMs(""), undefined);
});

test("Anthropic headers: input/output buckets with RFC 3339 resets; tokens-* dropped beside them", () => {
  const now = Date.parse("2026-01-01T00:00:00Z");
  const facts = parseRateLimitHeaders(
    {
      "anthropic-ratelimit-requests-limit": "4000",
      "anthropic-ratelimit-requests-remaining": "3999",
      "anthropic-ratelimit-requests-reset": "2026-01-01T00:00:00.015Z",
      "anthropic-ratelimit-input-tokens-limit": "400000",
      "anthropic-ratelimit-input-tokens-remaining": "398000",
      "anthropic-ratelimit-input-tokens-reset": "2026-01-01T00:00:01Z",
      "anthropic-ratelimit-output-tokens-limit": "80000",
      "anthropic-ratelimit-output-tokens-remaining": "80000",
      "anthropic-ratelimit-output-tokens-reset": "2026-01-01T00:00:00Z",
      "anthropic-ratelimit-tokens-limit": "80000",
      "anthropic-ratelimit-tokens-remaining": "80000",
    },
    now,
  );
  assert.deepEqual(facts.dims.requests, { limitPerMinute: 4000, remaining: 3999, resetInMs: 15 });
  assert.deepEqual(facts.dims.inputTokens, { limitPerMinute: 400_000, remaining: 398_000, resetInMs: 1000 });
  assert.deepEqual(facts.dims.outputTokens, { limitPerMinute: 80_000, remaining: 80_000, resetInMs: 0 });
  assert.equal(facts.dims.tokens, undefined);
  assert.equal(facts.retryAfterMs, undefined);
});

test("Anthropic tokens-* alone is kept as the combined bucket", () => {
  const facts = parseRateLimitHeaders({ "anthropic-ratelimit-tokens-limit": "100000" }, 0);
  assert.deepEqual(facts.dims.tokens, { limitPerMinute: 100_000 });
});

test("OpenAI headers: requests and combined tokens with duration resets", () => {
  const facts = parseRateLimitHeaders({
    "x-ratelimit-limit-requests": "500",
    "x-ratelimit-remaining-requests": "499",
    "x-ratelimit-reset-requests": "120ms",
    "x-ratelimit-limit-tokens": "30000",
    "x-ratelimit-remaining-tokens": "29000",
    "x-ratelimit-reset-tokens": "6m0s",
  });
  assert.deepEqual(facts.dims.requests, { limitPerMinute: 500, remaining: 499, resetInMs: 120 });
  assert.deepEqual(facts.dims.tokens, { limitPerMinute: 30_000, remaining: 29_000, resetInMs: 360_000 });
  assert.equal(facts.dims.inputTokens, undefined);
});

test("retry-after: seconds, HTTP date, retry-after-ms wins; none gives undefined", () => {
  const now = Date.parse("2026-01-01T00:00:00Z");
  assert.equal(parseRetryAfterMs({ "retry-after": "7" }, now), 7000);
  assert.equal(parseRetryAfterMs({ "retry-after": "Thu, 01 Jan 2026 00:00:05 GMT" }, now), 5000);
  assert.equal(parseRetryAfterMs({ "retry-after": "7", "retry-after-ms": "6500" }, now), 6500);
  assert.equal(parseRetryAfterMs({}, now), undefined);
  assert.equal(parseRateLimitHeaders({ "retry-after": "3" }, now).retryAfterMs, 3000);
});

test("malformed numbers are ignored, not read as zero", () => {
  const facts = parseRateLimitHeaders({
    "x-ratelimit-limit-requests": "lots",
    "x-ratelimit-remaining-requests": "-1",
  });
  assert.equal(facts.dims.requests, undefined);
});
