import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";
import { calcPrice, findProvider } from "@pydantic/genai-prices";
import fc from "fast-check";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import {
  exactCostNanoUsd,
  PRICE_DATA_VERSION,
  PriceTable,
  usdPerMtokToAttoPerToken,
} from "../../providers/pricing.js";
import { emptyTokenUsage, type TokenUsage } from "../../providers/types.js";

const u = (p: Partial<TokenUsage>): TokenUsage => ({ ...emptyTokenUsage(), ...p });
const AFTER_2026_03_13 = Date.parse("2026-06-01T00:00:00Z");

test("prices parse exactly: USD/Mtok to atto-USD per token", () => {
  assert.equal(usdPerMtokToAttoPerToken("3"), 3_000_000_000_000n);
  assert.equal(usdPerMtokToAttoPerToken("0.0375"), 37_500_000_000n);
  assert.equal(usdPerMtokToAttoPerToken(0.075), 75_000_000_000n);
  assert.equal(usdPerMtokToAttoPerToken(1e-7), 100_000n);
  assert.throws(() => usdPerMtokToAttoPerToken("-1"));
  assert.throws(() => usdPerMtokToAttoPerToken("abc"));
});

test("the version names the data package at the exact version package.json pins", async () => {
  const pkg = JSON.parse(await readFile(new URL("../../package.json", import.meta.url), "utf8")) as {
    dependencies: Record<string, string>;
  };
  const pinned = pkg.dependencies["@pydantic/genai-prices"];
  assert.match(pinned ?? "", /^\d+\.\d+\.\d+$/, "the price data must be pinned to one exact version");
  assert.equal(PRICE_DATA_VERSION, `genai-prices@${pinned}`);
  assert.equal(new PriceTable().version, PRICE_DATA_VERSION);
});

test("Anthropic from the data: input, cache writes (5m, 1h) and cache reads each at their own rate", () => {
  const t = new PriceTable();
  // claude-opus-4-8 list prices: $5 in, $25 out, $6.25 write 5m, $10 write 1h, $0.50 read (per Mtok)
  const usage = u({
    inputTokens: 1000 + 2000 + 500 + 10_000,
    cacheWriteTokens: 2500,
    cacheWrite1hTokens: 500,
    cacheReadTokens: 10_000,
    outputTokens: 300,
  });
  // nano-USD per token = USD/Mtok × 1000
  const want = 1000 * 5000 + 2000 * 6250 + 500 * 10_000 + 10_000 * 500 + 300 * 25_000;
  const c = t.cost("claude-opus-4-8", usage);
  assert.equal(c.costNanoUsd, want);
  assert.equal(c.priceKey, "claude-opus-4-8");
  assert.equal(c.priceVersion, PRICE_DATA_VERSION);
  // a dated snapshot id is the same model
  assert.equal(t.cost("claude-sonnet-4-5-20250929", u({ inputTokens: 1000 })).priceKey, "claude-sonnet-4-5");
});

test("OpenAI from the data: cached tokens inside the prompt at the cached rate, reasoning inside output", () => {
  const t = new PriceTable();
  // gpt-4o-mini: $0.15 in, $0.075 cached, $0.60 out per Mtok = 150, 75, 600 nano-USD per token
  const usage = u({ inputTokens: 1000, cacheReadTokens: 400, outputTokens: 200, reasoningTokens: 150 });
  assert.equal(t.cost("gpt-4o-mini", usage).costNanoUsd, 600 * 150 + 400 * 75 + 200 * 600);
});

test("tiered prices: a call over the tier's start is priced at the tier's rates throughout", () => {
  const t = new PriceTable();
  // claude-sonnet-4-5: $3 / $15 up to 200k input tokens, $6 / $22.50 above
  assert.equal(
    t.cost("claude-sonnet-4-5", u({ inputTokens: 200_000, outputTokens: 1000 })).costNanoUsd,
    200_000 * 3000 + 1000 * 15_000,
  );
  assert.equal(
    t.cost("claude-sonnet-4-5", u({ inputTokens: 200_001, outputTokens: 1000 })).costNanoUsd,
    200_001 * 6000 + 1000 * 22_500,
  );
});

test("dated prices: the rates in force when the call started", () => {
  const t = new PriceTable();
  // claude-sonnet-4-6: tiered above 200k until 2026-03-13, flat $3 / $15 from then on
  const big = u({ inputTokens: 300_000 });
  assert.equal(
    t.cost("claude-sonnet-4-6", big, Date.parse("2026-01-01T00:00:00Z")).costNanoUsd,
    300_000 * 6000,
  );
  assert.equal(t.cost("claude-sonnet-4-6", big, AFTER_2026_03_13).costNanoUsd, 300_000 * 3000);
});

test("a model nothing prices is unknown: no family or most-expensive fallback", () => {
  const t = new PriceTable();
  for (const m of ["mystery-model", "claude-opus-9-9", "gpt-6.2-sol", "", "constructor", "__proto__"]) {
    assert.equal(t.knows(m), false, m);
    assert.throws(
      () => t.cost(m, u({ inputTokens: 1 })),
      (e: unknown) =>
        e instanceof EvalfleetError && e.code === ErrorCode.UnknownPrice && /prices:/.test(e.message),
    );
  }
});

test("config prices override the data and change the version; absent cache rates follow the wire's rule", () => {
  const t = new PriceTable({
    "claude-sonnet-4-5": { provider: "anthropic", input: "2", output: "10" },
    "my-model": { provider: "anthropic", input: 4, output: 20 },
    "my-oai": { provider: "openai", input: 1, output: 2 },
  });
  assert.match(t.version, new RegExp(`^${PRICE_DATA_VERSION.replace(/\./g, "\\.")}\\+cfg\\.[0-9a-f]{10}$`));
  assert.equal(t.cost("claude-sonnet-4-5", u({ inputTokens: 1000 })).costNanoUsd, 2_000_000);
  // the data's cache rates stay where the config gives none: read $0.30
  assert.equal(
    t.cost("claude-sonnet-4-5", u({ inputTokens: 1000, cacheReadTokens: 1000 })).costNanoUsd,
    300_000,
  );
  // unknown to the data, Anthropic wire: write 5m 1.25x, 1h 2x, read at input (never under)
  const w = u({ inputTokens: 300, cacheWriteTokens: 200, cacheWrite1hTokens: 100, cacheReadTokens: 100 });
  assert.equal(t.cost("my-model", w).costNanoUsd, 100 * 5000 + 100 * 8000 + 100 * 4000);
  // OpenAI wire: no write charge
  assert.equal(t.cost("my-oai", u({ inputTokens: 100, cacheWriteTokens: 100 })).costNanoUsd, 100 * 1000);
  assert.equal(t.cost("my-model-20260101", u({ outputTokens: 1 })).priceKey, "my-model");
  assert.throws(() => new PriceTable({ x: { input: 1 } as never }), /needs at least input and output/);
});

test("rounding is UP once per call: never under-charges", () => {
  const t = new PriceTable({
    tiny: { provider: "openai", input: "0.0123", output: "0.0456", cacheRead: "0.0011" },
  });
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

test("every Anthropic and OpenAI text model in the data: the exact cost agrees with the library's own", () => {
  const t = new PriceTable();
  let checked = 0;
  for (const pid of ["anthropic", "openai"] as const) {
    const provider = findProvider({ providerId: pid });
    assert.ok(provider);
    for (const m of provider.models) {
      const id = m.id;
      // models priced by units evalfleet does not meter (audio, images, hours) are not text models
      if (!t.knows(id) || t.lookup(id)?.key !== id) continue;
      fc.assert(
        fc.property(
          fc.nat(400_000),
          fc.nat(50_000),
          fc.nat(50_000),
          fc.nat(20_000),
          (inp, read, write, out) => {
            const usage = u({
              inputTokens: inp + read + write,
              cacheReadTokens: read,
              cacheWriteTokens: write,
              outputTokens: out,
            });
            const lib = calcPrice(
              {
                input_tokens: usage.inputTokens,
                cache_read_tokens: read,
                cache_write_tokens: write,
                output_tokens: out,
              },
              id,
              { providerId: pid, timestamp: new Date(AFTER_2026_03_13) },
            );
            if (!lib) return false;
            const exact = t.cost(id, usage, AFTER_2026_03_13).costNanoUsd;
            // the library sums floats; ours is exact and rounded up to the nano-USD once
            return Math.abs(exact - lib.total_price * 1e9) <= 1 + lib.total_price * 1e9 * 1e-12;
          },
        ),
        { numRuns: 25 },
      );
      checked++;
    }
  }
  assert.ok(checked > 50, `only ${checked} models checked`);
});

test("budget helpers: smallest possible cost, affordable output, worst case", () => {
  const t = new PriceTable();
  // sonnet-4-5: 1000 tokens at the read rate ($0.30/Mtok = 300 nano each) + 1 output token (15_000 nano)
  assert.equal(t.minCostNanoUsd("claude-sonnet-4-5", 1000), 315_000n);
  // $0.01 left, 1000 input at $3 = 3_000_000 nano; 7_000_000 / 15_000 per output token
  assert.equal(t.affordableOutputTokens("claude-sonnet-4-5", 1000, 10_000_000n), 466);
  assert.equal(t.affordableOutputTokens("claude-sonnet-4-5", 1_000_000, 10_000_000n), 0);
  // worst case: input at the highest input-side rate the request can incur, over the highest tier
  const opus = (w: "none" | "5m" | "1h") =>
    t.worstCaseNanoUsd("claude-opus-4-8", { inputTokens: 1000, outputTokens: 100, cacheWrites: w });
  assert.equal(opus("none"), 1000n * 5000n + 100n * 25_000n);
  assert.equal(opus("5m"), 1000n * 6250n + 100n * 25_000n);
  assert.equal(opus("1h"), 1000n * 10_000n + 100n * 25_000n);
  // tiers rise with input: a call of at most 10 input tokens never reaches the long-context rates; 250k does
  assert.equal(
    t.worstCaseNanoUsd("claude-sonnet-4-5", { inputTokens: 10, outputTokens: 10, cacheWrites: "none" }),
    10n * 3000n + 10n * 15_000n,
  );
  assert.equal(
    t.worstCaseNanoUsd("claude-sonnet-4-5", { inputTokens: 250_000, outputTokens: 10, cacheWrites: "none" }),
    250_000n * 6000n + 10n * 22_500n,
  );
  assert.equal(t.affordableWorstOutput("claude-sonnet-4-5", 1000, "none", 3_000_000n + 150_000n), 10);
  assert.equal(t.outputLimit("claude-opus-4-8"), 1_000_000);
});

test("exactCostNanoUsd handles big numbers without precision loss", () => {
  const f = (x: bigint) => ({ base: x, tiers: [] });
  const r = { input: f(3n), output: f(7n), cacheRead: f(1n), cacheWrite5m: f(2n), cacheWrite1h: f(5n) };
  const big = 2 ** 52;
  assert.equal(
    exactCostNanoUsd(r, u({ inputTokens: big, outputTokens: big })),
    (BigInt(big) * 10n + 999_999_999n) / 1_000_000_000n,
  );
});
