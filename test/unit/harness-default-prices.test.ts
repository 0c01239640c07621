/**
 * The models Claude Code, Codex and opencode run when a user does not pick one, priced from the pinned data and
 * checked against the providers' published list prices (USD per million tokens, typed in from their price pages, not
 * from the data). A model the data does not know must be refused at plan time, never priced by a guess.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { claudeCode, codex, opencode } from "../../harnesses/index.js";
import { RunConfigSchema } from "../../protocol/config.js";
import { PRICE_DATA_VERSION, PriceTable } from "../../providers/pricing.js";
import { unpricedModels } from "../../providers/run-prices.js";
import { emptyTokenUsage } from "../../providers/types.js";

interface ListPrice {
  input: number;
  output: number;
  cacheRead: number;
  /** Anthropic only: 5-minute and 1-hour cache writes */
  cacheWrite5m?: number;
  cacheWrite1h?: number;
}

/** Published list prices (platform.claude.com/docs/en/about-claude/pricing, openai.com/api/pricing). */
const LIST: Record<string, ListPrice | "unknown to the data"> = {
  "claude-opus-4-8": { input: 5, output: 25, cacheRead: 0.5, cacheWrite5m: 6.25, cacheWrite1h: 10 },
  "claude-sonnet-4-5": { input: 3, output: 15, cacheRead: 0.3, cacheWrite5m: 3.75, cacheWrite1h: 6 },
  // Codex 0.171's default is newer than the pinned data: a run on it must bring its own price.
  "gpt-6.2-sol": "unknown to the data",
};

/** nano-USD for one million tokens of one kind: the list price in USD × 1e9. */
const perMtok = (usd: number) => Math.round(usd * 1e9);
/** 100k tokens: under every long-context tier, so the list (base) price applies; cost × 10 is per million. */
const N = 100_000;

for (const adapter of [claudeCode, codex, opencode]) {
  const def = adapter.defaultModel;
  test(`${adapter.kind}: its default model is priced at its list price, or refused`, () => {
    assert.ok(def, `${adapter.kind} declares the model it runs by default`);
    const list = LIST[def.model];
    assert.ok(list, `add ${def.model}'s published list price to this test`);
    const t = new PriceTable();
    const config = RunConfigSchema.parse({
      name: "defaults",
      harnesses: [{ name: adapter.kind, adapter: adapter.kind }],
      models: [{ name: def.model, provider: def.provider }],
      tasks: ["*"],
    });
    if (list === "unknown to the data") {
      assert.equal(
        t.knows(def.model),
        false,
        `${PRICE_DATA_VERSION} now knows ${def.model}: add its list price`,
      );
      const issues = unpricedModels(config);
      assert.equal(issues.length, 1);
      assert.equal(issues[0]?.path, "models.0.prices");
      assert.match(
        issues[0]?.reason ?? "",
        new RegExp(`no price for model "${def.model.replace(/\./g, "\\.")}"`),
      );
      return;
    }
    assert.deepEqual(unpricedModels(config), []);
    const M = N;
    const cost = (p: Partial<ReturnType<typeof emptyTokenUsage>>) =>
      t.cost(def.model, { ...emptyTokenUsage(), ...p }).costNanoUsd * (1_000_000 / N);
    assert.equal(cost({ inputTokens: M }), perMtok(list.input), "input");
    assert.equal(cost({ outputTokens: M }), perMtok(list.output), "output");
    assert.equal(cost({ inputTokens: M, cacheReadTokens: M }), perMtok(list.cacheRead), "cache read");
    if (list.cacheWrite5m !== undefined)
      assert.equal(
        cost({ inputTokens: M, cacheWriteTokens: M }),
        perMtok(list.cacheWrite5m),
        "cache write 5m",
      );
    if (list.cacheWrite1h !== undefined)
      assert.equal(
        cost({ inputTokens: M, cacheWriteTokens: M, cacheWrite1hTokens: M }),
        perMtok(list.cacheWrite1h),
        "cache write 1h",
      );
  });
}

test("the family fallback is gone: claude-opus-4-8 is not priced at claude-opus-4's $15 / $75", () => {
  const c = new PriceTable().cost("claude-opus-4-8", {
    ...emptyTokenUsage(),
    inputTokens: 1_000_000,
    outputTokens: 1_000_000,
  });
  assert.equal(c.costNanoUsd, perMtok(5 + 25));
  assert.equal(c.priceKey, "claude-opus-4-8");
});
