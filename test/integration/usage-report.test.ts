import assert from "node:assert/strict";
import { test } from "node:test";
import { fetchUsageReport } from "../../providers/usage-report.js";
import { startScriptedProvider } from "../../scripted-provider/index.js";
import { scriptedKeyId } from "../../scripted-provider/usage-report.js";

/*
 * The admin usage reports as evalfleet reads them (providers/usage-report.ts), against the scripted provider's own
 * bill: Anthropic's usage report and OpenAI's organization usage, per key and model, cache classes apart; a wrong
 * admin key is refused with what to check.
 */

const KEY = "sk-usage-key";
const OTHER = "sk-usage-other";
const ADMIN = "sk-usage-admin";

test("usage reports sum each key's calls per model, as the provider billed them", async () => {
  const provider = await startScriptedProvider({
    keys: [KEY, OTHER],
    adminKeys: [ADMIN],
    scenario: (req) => ({
      text: "done",
      usage:
        req.provider === "anthropic"
          ? { input: 100 + req.index, output: 20, cacheRead: 50, cacheWrite5m: 30, cacheWrite1h: 7 }
          : { input: 200 + req.index, output: 40, cacheRead: 64 },
    }),
  });
  try {
    const post = async (key: string, path: string, body: unknown) => {
      const res = await fetch(`${provider.url}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": key, authorization: `Bearer ${key}` },
        body: JSON.stringify(body),
      });
      assert.equal(res.status, 200, await res.text());
    };
    const t0 = Date.now();
    for (const key of [KEY, KEY, OTHER]) {
      await post(key, "/v1/messages", {
        model: "claude-haiku-4-5",
        max_tokens: 50,
        messages: [{ role: "user", content: "x" }],
      });
      await post(key, "/v1/chat/completions", {
        model: "gpt-4.1-mini",
        messages: [{ role: "user", content: "x" }],
      });
    }
    const mine = provider.calls().filter((c) => c.key === KEY && c.billed);
    const want = (model: string) => {
      const cs = mine.filter((c) => c.model === model).map((c) => c.billed!);
      return {
        input: cs.reduce((a, u) => a + u.inputTokens, 0),
        cacheRead: cs.reduce((a, u) => a + u.cacheReadTokens, 0),
        cacheWrite: cs.reduce((a, u) => a + u.cacheWriteTokens, 0),
        cacheWrite1h: cs.reduce((a, u) => a + u.cacheWrite1hTokens, 0),
        output: cs.reduce((a, u) => a + u.outputTokens, 0),
      };
    };
    for (const p of ["anthropic", "openai"] as const) {
      const report = await fetchUsageReport(
        { provider: p, baseUrl: provider.url, adminKey: ADMIN, apiKeyId: scriptedKeyId(KEY), lagMs: 0 },
        t0,
        Date.now() + 1,
      );
      const model = p === "anthropic" ? "claude-haiku-4-5" : "gpt-4.1-mini";
      const got = report.get(model);
      assert.ok(got, `${p}: ${model} in the report`);
      const w = want(model);
      assert.equal(
        got.uncachedInput + got.cacheRead + got.cacheWrite5m + got.cacheWrite1h,
        w.input,
        `${p} input`,
      );
      assert.equal(got.cacheRead, w.cacheRead, `${p} cache reads`);
      assert.equal(got.cacheWrite5m + got.cacheWrite1h, w.cacheWrite, `${p} cache writes`);
      if (p === "anthropic") assert.equal(got.cacheWrite1h, w.cacheWrite1h, "1-hour writes apart");
      assert.equal(got.output, w.output, `${p} output`);
      assert.equal(
        report.size,
        2,
        `${p}: only the key's own models (both providers' calls share the scripted org)`,
      );
    }
    // The whole organisation without a key id: the other key's calls too.
    const all = await fetchUsageReport(
      { provider: "anthropic", baseUrl: provider.url, adminKey: ADMIN, lagMs: 0 },
      t0,
      Date.now() + 1,
    );
    assert.equal(all.get("claude-haiku-4-5")?.output, 3 * 20);
    await assert.rejects(
      fetchUsageReport(
        { provider: "anthropic", baseUrl: provider.url, adminKey: KEY, lagMs: 0 },
        t0,
        Date.now(),
      ),
      /401.*admin key/s,
    );
  } finally {
    await provider.close();
  }
});
