import assert from "node:assert/strict";
import { test } from "node:test";
import { sizeFleet, tokensPerCallFromStats } from "../../pacer/fleet.js";

const observed = {
  tokensPerCall: { inputTokens: 20_000, outputTokens: 1000 },
  callsPerAttempt: 40,
  callLatencyMs: 6000,
};

test("the binding limit sets the call rate; Little's law turns it into concurrency", () => {
  // ITPM 2M / 20k = 100 calls/min; OTPM 400k / 1k = 400; RPM 4000. Input binds: 100 × 0.95 = 95 calls/min.
  const s = sizeFleet({
    limits: { requestsPerMinute: 4000, inputTokensPerMinute: 2_000_000, outputTokensPerMinute: 400_000 },
    observed,
  });
  assert.equal(s.binding, "inputTokens");
  assert.equal(s.callsPerMinute, 95);
  // back to back calls of 6 s: 10 calls/min per attempt -> 9 attempts
  assert.equal(s.callsPerMinutePerAttempt, 10);
  assert.equal(s.concurrency, 9);
  assert.equal(s.callsInFlight, 9.5);
  assert.deepEqual(s.inputs.observed, observed);
});

test("attempt duration (tool time between calls) raises the concurrency that fills the pool", () => {
  // 40 calls over 20 minutes = 2 calls/min per attempt -> 95 / 2 = 47
  const s = sizeFleet({
    limits: { inputTokensPerMinute: 2_000_000 },
    observed: { ...observed, attemptDurationMs: 20 * 60_000 },
  });
  assert.equal(s.concurrency, 47);
});

test("bounded by pending attempts and the backend ceiling; at least one; no limits needs a ceiling", () => {
  const limits = { requestsPerMinute: 1_000_000 };
  assert.equal(sizeFleet({ limits, observed, pendingAttempts: 30 }).concurrency, 30);
  assert.equal(sizeFleet({ limits, observed, maxConcurrency: 500 }).concurrency, 500);
  assert.equal(sizeFleet({ limits: { requestsPerMinute: 1 }, observed }).concurrency, 1);
  assert.equal(sizeFleet({ limits, observed, pendingAttempts: 0 }).concurrency, 0);
  const none = sizeFleet({ limits: {}, observed, maxConcurrency: 200 });
  assert.equal(none.binding, "none");
  assert.equal(none.concurrency, 200);
  assert.equal(none.callsPerMinute, -1);
});

test("combined tokens per minute (OpenAI) counts input and output", () => {
  const s = sizeFleet({ limits: { tokensPerMinute: 2_100_000 }, observed, utilization: 1 });
  assert.equal(s.binding, "tokens");
  assert.equal(s.callsPerMinute, 100);
});

test("a bare tokens-per-call figure counts in full against each token limit; stats give the split", () => {
  const s = sizeFleet({
    limits: { inputTokensPerMinute: 100_000, outputTokensPerMinute: 10_000 },
    observed: { ...observed, tokensPerCall: 1000 },
    utilization: 1,
  });
  assert.equal(s.binding, "outputTokens");
  assert.equal(s.callsPerMinute, 10);
  assert.deepEqual(
    tokensPerCallFromStats({ settledCalls: 4, inputTokens: 4000, outputTokens: 402, outputTokensP95: 150 }),
    {
      inputTokens: 1000,
      outputTokens: 101,
    },
  );
  assert.deepEqual(
    tokensPerCallFromStats({ settledCalls: 0, inputTokens: 0, outputTokens: 0, outputTokensP95: 0 }),
    {
      inputTokens: 0,
      outputTokens: 0,
    },
  );
});
