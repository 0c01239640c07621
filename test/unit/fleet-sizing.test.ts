import assert from "node:assert/strict";
import { test } from "node:test";
import { FLEET_PRIOR, poolsField, sizePool } from "../../actors/planner/fleet.js";
import type { PoolObservations } from "../../store/ledger.js";

const obs: PoolObservations = {
  calls: 120,
  attempts: 30,
  provider: "anthropic",
  inputTokensPerCall: 10_000,
  cacheReadTokensPerCall: 0,
  cacheWriteTokensPerCall: 0,
  outputTokensPerCall: 500,
  latencyP50Ms: 1_800,
  latencyMeanMs: 2_000,
  attemptDurationMs: 9_500,
};

test("observed calls: Little's law against the binding limit", () => {
  // ITPM 1M / 10k = 100 calls/min × 0.95 = 95; one attempt: 4 calls per 9.5 s = 25.26/min → 95 / 25.26 = 3.76 → 3
  const f = sizePool({
    limits: { requestsPerMinute: 1_000, inputTokensPerMinute: 1_000_000, outputTokensPerMinute: 80_000 },
    observed: { from: "run", obs },
    pendingAttempts: 50,
  });
  assert.equal(f.fleetSize, 3);
  assert.equal(f.binding, "inputTokens");
  assert.equal(f.source, "run");
  assert.equal(f.inputs.callsPerMinute, 95);
  assert.equal(f.inputs.callsPerAttempt, 4);
  assert.equal(f.inputs.callsPerMinutePerAttempt, 25.26);
  assert.equal(f.inputs.fromRun, 1);
  assert.equal(f.inputs.latencyP50Ms, 1_800);
  assert.equal(f.inputs.inputTokensPerMinute, 1_000_000);
  assert.equal(f.inputs.pendingAttempts, 50);
});

test("the run's remaining cells bound the size", () => {
  const f = sizePool({
    limits: { requestsPerMinute: 100_000 },
    observed: { from: "run", obs },
    pendingAttempts: 2,
  });
  assert.equal(f.fleetSize, 2);
});

test("cache reads count toward input TPM for OpenAI, not for Anthropic", () => {
  const cached = { ...obs, inputTokensPerCall: 10_000, cacheReadTokensPerCall: 8_000 };
  const limits = { inputTokensPerMinute: 1_000_000 };
  const anthropic = sizePool({ limits, observed: { from: "history", obs: cached } });
  const openai = sizePool({ limits, observed: { from: "history", obs: { ...cached, provider: "openai" } } });
  assert.equal(anthropic.inputs.inputTokensPerCall, 2_000);
  assert.equal(openai.inputs.inputTokensPerCall, 10_000);
  assert.equal(anthropic.inputs.fromHistory, 1);
  // 1M / 2k × 0.95 = 475 calls/min over 25.26 per attempt = 18.8 → 18; OpenAI as above → 3
  assert.equal(anthropic.fleetSize, 18);
  assert.equal(openai.fleetSize, 3);
});

test("no observations: the conservative prior, said so in the inputs and reason", () => {
  // RPM 600 × 0.95 = 570; output 40k / 1k = 40 × 0.95 = 38 calls/min binds; back to back at 2 s = 30/min → 1
  const f = sizePool({ limits: { requestsPerMinute: 600, outputTokensPerMinute: 40_000 }, observed: null });
  assert.equal(f.source, "prior");
  assert.equal(f.inputs.prior, 1);
  assert.equal(f.inputs.inputTokensPerCall, FLEET_PRIOR.inputTokensPerCall);
  assert.equal(f.binding, "outputTokens");
  assert.equal(f.fleetSize, 1);
  assert.match(f.reason, /prior/);
  // the pacer's observed output p95 raises the prior's output tokens
  const p95 = sizePool({ limits: { inputTokensPerMinute: 800_000 }, observed: null, outputTokensP95: 4_000 });
  assert.equal(p95.inputs.outputTokensPerCall, 4_000);
  // 800k / 8k = 100 × 0.95 = 95 calls/min; 30 per attempt → 3
  assert.equal(p95.fleetSize, 3);
});

test("no limits known: uncapped, left out of the run key's pools, with the reason", () => {
  const f = sizePool({ limits: {}, observed: { from: "run", obs }, pendingAttempts: 7 });
  assert.equal(f.fleetSize, null);
  assert.equal(f.inputs.uncapped, 1);
  assert.match(f.reason, /no limits/);
  const capped = sizePool({ limits: { requestsPerMinute: 60 }, observed: null });
  assert.deepEqual(Object.keys(poolsField({ a: f, b: capped })), ["b"]);
});
