import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import {
  exactCostNanoUsd,
  PRICE_TABLE_VERSION,
  PriceTable,
  usdPerMtokToAttoPerToken,
} from "../../providers/pricing.js";
import { emptyUsage, type TokenUsage } from "../../providers/types.js";

const u = (p: Partial<TokenUsage>): TokenUsage => ({ ...emptyUsage(), ...p });

test("prices parse exactly: USD/Mtok to atto-USD per token", () => {
  assert.equal(usdPerMtokToAttoPerToken("3"), 3_000_000_000_000n);
  assert.equal(usdPerMtokToAttoPerToken("0.0375"), 37_500_000_000n);
  assert.equal(usdPerMtokToAttoPerToken(0.075), 75_000_000_000n);
  assert.equal(usdPerMtokToAttoPerToken(1e-7), 100_000n);
  assert.throws(() => usdPerMtokToAttoPerToken("-1"));
  assert.throws(() => usdPerMtokToAttoPerToken("abc"));
});

test("Anthropic: input, cache writes (5m, 1h) and cache reads each at their weight", () => {
  const t = new PriceTable();
  // sonnet: $3 in, $15 out, $3.75 write 5m, $6 write 1h, $0.30 read (per Mtok)
  const usage = u({
    inputTokens: 1000 + 2000 + 500 + 10_000,
    cacheWriteTokens: 2500,
    cacheWrite1hTokens: 500,
    cacheReadTokens: 10_000,
    outputTokens: 300,
  });
  const want = 1000 * 3000 + 2000 * 3750 + 500 * 6000 + 10_000 * 300 + 300 * 15_000; // nano-USD per token = USD/Mtok * 1000
  const c = t.cost("claude-sonnet-4-5-20250929", usage);
  assert.equal(c.costNanoUsd, want);
  assert.equal(c.priceKey, "claude-sonnet-4-5");
  assert.equal(c.priceVersion, PRICE_TABLE_VERSION);
});

test("OpenAI: cached tokens inside prompt are priced at the cached price, reasoning inside completion", () => {
  const t = new PriceTable();
  // gpt-4o-mini: $0.15 in, $0.075 cached, $0.60 out per Mtok = 150, 75, 600 nano-USD per token
  const usage = u({ inputTokens: 1000, cacheReadTokens: 400, outputTokens: 200, reasoningTokens: 150 });
  assert.equal(t.cost("gpt-4o-mini", usage).costNanoUsd, 600 * 150 + 400 * 75 + 200 * 600);
});

test("rounding is UP once per call: never under-charges", () => {
  // nano-USD per token = USD/Mtok x 1000, so sub-nano prices need more than 3 decimals
  const t = new PriceTable({ tiny: { input: "0.0123", output: "0.0456", cacheRead: "0.0011" } });
  assert.equal(t.cost("tiny", u({ inputTokens: 1, cacheReadTokens: 1 })).costNanoUsd, 2); // 1.1 nano
  assert.equal(t.cost("tiny", u({ inputTokens: 1 })).costNanoUsd, 13); // 12.3 nano
  assert.equal(t.cost("tiny", u({})).costNanoUsd, 0);
  fc.assert(
    fc.property(fc.nat(5_000_000), fc.nat(5_000_000), fc.nat(100_000), (input, cached, output) => {
      const usage = u({ inputTokens: input + cached, cacheReadTokens: cached, outputTokens: output });
      const tenths = BigInt(input) * 123n + BigInt(cached) * 11n + BigInt(output) * 456n;
      return BigInt(t.cost("tiny", usage).costNanoUsd) === (tenths + 9n) / 10n;
    }),
  );
});

test("config prices override the defaults and change the version", () => {
  const t = new PriceTable({
    "claude-sonnet-4-5": { input: "2" },
    "my-alias-model": { input: 1, output: 2 },
  });
  assert.notEqual(t.version, PRICE_TABLE_VERSION);
  assert.match(t.version, /^2026-12-01\.1\+cfg\./);
  assert.equal(t.cost("claude-sonnet-4-5", u({ inputTokens: 1000 })).costNanoUsd, 2_000_000);
  assert.equal(t.cost("my-alias-model", u({ inputTokens: 1000, outputTokens: 1000 })).costNanoUsd, 3_000_000);
});

test("unknown models are priced at the most expensive entry; families catch new versions", () => {
  const t = new PriceTable();
  const c = t.cost("mystery-model", u({ inputTokens: 1_000_000 }));
  assert.equal(c.known, false);
  assert.equal(c.costNanoUsd, 15 * 1e9);
  assert.equal(t.keyFor("claude-opus-4-8"), "claude-opus-4");
  assert.equal(t.keyFor("claude-opus-5"), "claude-opus");
  assert.equal(t.keyFor("claude-haiku-4-5-20251001"), "claude-haiku-4-5");
  assert.equal(t.keyFor("gpt-4o-mini-2024-07-18"), "gpt-4o-mini");
  assert.equal(t.keyFor("gpt-4o"), "gpt-4o");
});

test("budget helpers: smallest possible cost and affordable output", () => {
  const t = new PriceTable();
  // sonnet: 1000 tokens at the read price ($0.30/Mtok = 300 nano each) + 1 output token (15_000 nano)
  assert.equal(t.minCostNanoUsd("claude-sonnet-4-5", 1000), 315_000n);
  // $0.01 left, 1000 input at $3 = 3000 nano... 10_000_000 - 3_000_000 = 7_000_000 nano / 15_000 nano per token
  assert.equal(t.affordableOutputTokens("claude-sonnet-4-5", 1000, 10_000_000n), 466);
  assert.equal(t.affordableOutputTokens("claude-sonnet-4-5", 1_000_000, 10_000_000n), 0);
});

test("exactCostNanoUsd handles big numbers without precision loss", () => {
  const p = { input: 3n, output: 7n, cacheRead: 1n, cacheWrite5m: 2n, cacheWrite1h: 5n };
  const big = 2 ** 52;
  assert.equal(
    exactCostNanoUsd(p, u({ inputTokens: big, outputTokens: big })),
    (BigInt(big) * 10n + 999_999_999n) / 1_000_000_000n,
  );
});
