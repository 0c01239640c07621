import assert from "node:assert/strict";
import { test } from "node:test";
import { PoolBucket } from "../../pacer/bucket.js";
import { parseRateLimitHeaders } from "../../pacer/headers.js";
import { LocalPacer } from "../../pacer/local.js";

const one = (inputTokens = 0, outputTokens = 0) => ({ requests: 1, inputTokens, outputTokens });

test("starts full at the burst, then refills continuously at limit/60 000 per ms", () => {
  const b = new PoolBucket({ limits: { requestsPerMinute: 600 }, burstMs: 1000 }, 0, true); // 10/s, capacity 10
  for (let i = 0; i < 10; i++) assert.equal(b.tryTake(one(), 0), 0);
  const waitMs = b.tryTake(one(), 0);
  assert.ok(Math.abs(waitMs - 100) < 1e-6, `wait ${waitMs}`);
  assert.ok(b.tryTake(one(), 50) > 0);
  assert.equal(b.tryTake(one(), 100), 0);
  // Refill stops at capacity.
  assert.equal(b.levels(1_000_000).requests, 10);
});

test("a fresh pool starts empty and fills at its rate (the key may already be in use)", () => {
  const b = new PoolBucket({ limits: { requestsPerMinute: 600 } }, 0);
  assert.equal(b.levels(0).requests, 0);
  assert.ok(Math.abs(b.tryTake(one(), 0) - 100) < 1e-6);
  assert.equal(b.levels(500).requests, 5);
});

test("every paced bucket must hold the cost; the slowest decides the wait", () => {
  const b = new PoolBucket(
    { limits: { requestsPerMinute: 6000, inputTokensPerMinute: 60_000, outputTokensPerMinute: 6000 } },
    0,
    true,
  );
  // capacities (burst 1 s): 100 requests, 1000 input, 100 output
  assert.equal(b.tryTake(one(500, 100), 0), 0);
  const waitMs = b.tryTake(one(100, 50), 0); // output empty: 50 tokens at 0.1/ms = 500 ms
  assert.ok(Math.abs(waitMs - 500) < 1e-6, `wait ${waitMs}`);
  assert.equal(b.tryTake(one(100, 50), 500), 0);
});

test("a call larger than the burst passes from a full bucket and leaves debt", () => {
  const b = new PoolBucket({ limits: { inputTokensPerMinute: 60_000 } }, 0, true); // 1/ms, capacity 1000
  assert.equal(b.tryTake(one(5000), 0), 0);
  assert.equal(b.levels(0).inputTokens, -4000);
  const waitMs = b.tryTake(one(5000), 0); // needs a full bucket again: 5000 ms
  assert.ok(Math.abs(waitMs - 5000) < 1e-6);
});

test("settle replaces the estimate with usage; refund gives everything back, capped at capacity", () => {
  const pacer = new LocalPacer(
    { pools: { p: { limits: { inputTokensPerMinute: 60_000, outputTokensPerMinute: 60_000 } } } },
    { now: () => 0 },
  );
  const pool = pacer.pool("p");
  pool.bucket = new PoolBucket(pool.bucket.cfg, 0, true);
  assert.equal(pool.bucket.tryTake(one(800, 800), 0), 0);
  // used 300 input and 900 output
  pool.adjust(
    pool.settleStats(one(800, 800), {
      inputTokens: 300,
      outputTokens: 900,
      cacheReadTokens: 0,
      cacheWriteTokens: 0,
    }),
  );
  assert.equal(pool.bucket.levels(0).inputTokens, 700);
  assert.equal(pool.bucket.levels(0).outputTokens, 100);
  pool.adjust(one(800, 800));
  assert.equal(pool.bucket.levels(0).inputTokens, 1000);
  assert.equal(pool.stats().settledCalls, 1);
  assert.equal(pool.stats().outputTokensP95, 900);
});

test("cache reads do not count toward input tokens per minute (Anthropic); writes do; OpenAI weight 1", () => {
  // inputTokens excludes cache reads (300 = 100 uncached + 200 cache writes), as the shim settles it; 500 cache reads
  for (const [weight, expected] of [
    [0, 1000 - 100 - 200],
    [1, 1000 - 800],
  ] as const) {
    const pacer = new LocalPacer(
      { pools: { p: { limits: { inputTokensPerMinute: 60_000 }, cacheReadInputWeight: weight } } },
      { now: () => 0 },
    );
    const pool = pacer.pool("p");
    pool.bucket = new PoolBucket(pool.bucket.cfg, 0, true);
    pool.bucket.tryTake(one(0, 0), 0);
    pool.adjust(
      pool.settleStats(one(0, 0), {
        inputTokens: 300,
        outputTokens: 0,
        cacheReadTokens: 500,
        cacheWriteTokens: 200,
      }),
    );
    assert.equal(pool.bucket.levels(0).inputTokens, expected);
  }
});

test("429 empties and pauses until retry-after (or the reset); limits unchanged", () => {
  const b = new PoolBucket({ limits: { requestsPerMinute: 600 } }, 0, true);
  b.observe(429, parseRateLimitHeaders({ "retry-after": "2" }), 0);
  assert.equal(b.tryTake(one(), 1999), 1);
  assert.equal(b.levels(1999).requests! <= 10, true);
  assert.equal(b.tryTake(one(), 2000), 0);
  assert.equal(b.currentLimits().requestsPerMinute, 600);
  const c = new PoolBucket({ limits: { requestsPerMinute: 600 } }, 0, true);
  c.observe(429, parseRateLimitHeaders({ "x-ratelimit-reset-requests": "1.5s" }), 0);
  assert.equal(c.pausedForMs(0), 1500);
});

test("529 backs off with jitter, doubling per streak, without shrinking limits; a 2xx ends the streak", () => {
  const b = new PoolBucket({ limits: { requestsPerMinute: 600 }, overloadBaseMs: 1000 }, 0, true);
  b.observe(529, { dims: {} }, 0, () => 0); // 1000 * 0.5
  assert.equal(b.pausedForMs(0), 500);
  b.observe(529, { dims: {} }, 0, () => 0.99); // 2000 * 1.49
  assert.equal(Math.round(b.pausedForMs(0)), 2980);
  assert.equal(b.currentLimits().requestsPerMinute, 600);
  assert.equal(b.levels(0).requests, 10);
  b.observe(200, { dims: {} }, 5000);
  b.observe(529, { dims: {} }, 5000, () => 0);
  assert.equal(b.pausedForMs(5000), 500);
});

test("discovered limits replace configured ones; a new dimension starts empty; remaining lowers the level", () => {
  const b = new PoolBucket({ limits: { requestsPerMinute: 600 } }, 0, true);
  b.observe(
    200,
    parseRateLimitHeaders({
      "anthropic-ratelimit-requests-limit": "60",
      "anthropic-ratelimit-output-tokens-limit": "6000",
    }),
    0,
  );
  assert.equal(b.currentLimits().requestsPerMinute, 60);
  assert.equal(b.levels(0).requests, 1); // capacity shrank to 1 s of 1/s
  assert.equal(b.levels(0).outputTokens, 0);
  assert.equal(b.levels(1000).outputTokens, 100);
  b.observe(200, parseRateLimitHeaders({ "anthropic-ratelimit-output-tokens-remaining": "40" }), 1000);
  assert.equal(b.levels(1000).outputTokens, 40);
});

test("a successor restores limits and pause but starts empty", () => {
  const a = new PoolBucket({ limits: { requestsPerMinute: 600 } }, 0, true);
  a.observe(429, parseRateLimitHeaders({ "retry-after": "3", "x-ratelimit-limit-requests": "1200" }), 0);
  const cp = a.checkpoint(0, 1_000_000);
  const b = PoolBucket.restore({ limits: { requestsPerMinute: 600 } }, cp, 50, 1_001_000);
  assert.equal(b.currentLimits().requestsPerMinute, 1200);
  assert.equal(b.pausedForMs(50), 2000);
  assert.equal(b.levels(50).requests, 0);
});

test("LocalPacer holds the rate across concurrent callers, FIFO, and reports the wait", async () => {
  const pacer = new LocalPacer({ pools: { p: { limits: { requestsPerMinute: 1200 }, burstMs: 100 } } }); // 20/s, burst 2
  const start = Date.now();
  let admitted = 0;
  let maxWaitMs = 0;
  await Promise.all(
    Array.from({ length: 10 }, async () => {
      while (Date.now() - start < 1000) {
        const a = await pacer.admit({ pool: "p", inputTokens: 10, outputTokens: 10 });
        if (Date.now() - start <= 1000) admitted++;
        maxWaitMs = Math.max(maxWaitMs, a.waitedMs);
        a.settle({ inputTokens: 10, outputTokens: 10, cacheReadTokens: 0, cacheWriteTokens: 0 });
      }
    }),
  );
  await pacer.close();
  // Never above the rate: 20/s for 1 s plus the burst of 2 (how close it gets is bench:pacer's figure).
  assert.ok(admitted <= 22, `admitted ${admitted} in 1 s at 20/s`);
  assert.ok(maxWaitMs >= 300, `10 callers at 20/s wait ~500 ms, saw ${maxWaitMs}`);
});

test("LocalPacer: an abort while waiting rejects and frees the place; unlimited pools admit at once", async () => {
  const pacer = new LocalPacer({ pools: { p: { limits: { requestsPerMinute: 60 }, burstMs: 1000 } } });
  await pacer.admit({ pool: "p", inputTokens: 0, outputTokens: 0 });
  const ac = new AbortController();
  const waiting = pacer.admit({ pool: "p", inputTokens: 0, outputTokens: 0 }, ac.signal);
  setTimeout(() => ac.abort(), 20);
  await assert.rejects(waiting);
  assert.equal(pacer.pool("p").waiting, 0);
  const a = await pacer.admit({ pool: "free", inputTokens: 1e9, outputTokens: 1e9 });
  assert.equal(a.waitedMs, 0);
  await pacer.close();
});
