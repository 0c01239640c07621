import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { type Gateway, GatewayHeaders, startGateway } from "../../gateway/server.js";
import { LocalPacer } from "../../pacer/local.js";
import type { LedgerCall } from "../../protocol/messages.js";
import { PriceTable } from "../../providers/pricing.js";
import { type ScriptedProvider, startScriptedProvider } from "../../scripted-provider/index.js";
import { startShim } from "../../shim/index.js";
import type { Db } from "../../store/db.js";
import { createRunKey, hashKey, revokeRunKeys } from "../../store/keys.js";
import { saveRunMetadata } from "../../store/results.js";
import { reconcileAttempt, runSpendNanoUsd } from "../../store/spend.js";
import { type FreshDb, freshDb } from "../helpers/db.js";

const UPSTREAM_KEY = "sk-upstream-secret-only-the-gateway-holds";
let fdb: FreshDb;
let provider: ScriptedProvider;
let gw: Gateway;
let pacer: LocalPacer;
const prices = new PriceTable();

before(async () => {
  fdb = await freshDb("gateway_keys");
  provider = await startScriptedProvider({
    keys: [UPSTREAM_KEY],
    limits: { rpm: 6000, inputTpm: 10_000_000, outputTpm: 1_000_000 },
    scenario: { text: "hello there", usage: { input: 1200, output: 300 } },
  });
  const upA = { provider: "anthropic" as const, baseUrl: provider.url, apiKey: UPSTREAM_KEY };
  const upO = { provider: "openai" as const, baseUrl: provider.url, apiKey: UPSTREAM_KEY };
  pacer = new LocalPacer();
  gw = await startGateway({
    db: fdb.db,
    pacer,
    aliases: {
      "sonnet-a": {
        upstream: upA,
        model: "claude-sonnet-4-5",
        runs: ["run-a", "run-cap", "run-log"],
        pool: "cc__sonnet",
      },
      "gpt-b": { upstream: upO, model: "gpt-5", runs: ["run-b"] },
    },
  });
});
after(async () => {
  await gw.close();
  await provider.close();
  await pacer.close();
  await fdb.cleanup();
});

const anthropic = (apiKey: string) => new Anthropic({ baseURL: gw.url, apiKey, maxRetries: 0 });
const ask = (apiKey: string, model = "sonnet-a", extra: Record<string, string> = {}) =>
  anthropic(apiKey).messages.create(
    { model, max_tokens: 1000, messages: [{ role: "user", content: "hi" }] },
    { headers: extra },
  );

async function statusAndBody(p: Promise<unknown>): Promise<{ status: number; body: unknown }> {
  try {
    await p;
    return { status: 200, body: null };
  } catch (err) {
    const e = err as { status: number; error: unknown };
    return { status: e.status, body: e.error };
  }
}

test("a run key is efk-…, stored only as its sha256, and the upstream sees only the gateway's key", async () => {
  const key = await createRunKey(fdb.db, "run-a");
  assert.match(key, /^efk-[A-Za-z0-9_-]{43}$/);
  const rows = (
    await fdb.db.query<{ key_hash: string; key_prefix: string }>(
      "SELECT key_hash, key_prefix FROM virtual_keys WHERE run_name = 'run-a'",
    )
  ).rows;
  assert.equal(rows.length, 1);
  assert.equal(rows[0]!.key_hash, hashKey(key));
  assert.ok(!JSON.stringify(rows).includes(key));
  const msg = await ask(key);
  assert.equal(msg.content[0]?.type, "text");
  const served = provider.calls().at(-1)!;
  assert.equal(served.key, UPSTREAM_KEY);
  assert.equal(served.model, "claude-sonnet-4-5");
  assert.ok(!JSON.stringify(served.headers).includes(key), "the virtual key never reaches the upstream");
});

test("an alias is rewritten to its model in place: the rest of the request reaches the provider as sent", async () => {
  const key = await createRunKey(fdb.db, "run-a");
  const content = 'print("naïve \\"quoted\\" \\\\ path")\n'.repeat(2000);
  const body = `{"max_tokens": 50, "messages":[{"role":"user","content":${JSON.stringify(content)},"model":"nested"}], "model" : "sonnet-a"}`;
  const res = await fetch(`${gw.url}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": key, "anthropic-version": "2023-06-01" },
    body,
  });
  assert.equal(res.status, 200, await res.text());
  const served = provider.calls().at(-1)!;
  assert.equal(served.model, "claude-sonnet-4-5");
  assert.deepEqual(served.body, { ...(JSON.parse(body) as object), model: "claude-sonnet-4-5" });
  const bad = await fetch(`${gw.url}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": key },
    body: '{"model":"sonnet-a",',
  });
  assert.equal(bad.status, 400);
  assert.match(await bad.text(), /not valid JSON/);
});

test("unknown and revoked keys get the same 401; another run's key gets 403, like an alias that does not exist", async () => {
  const revoked = await createRunKey(fdb.db, "run-gone");
  assert.equal(await revokeRunKeys(fdb.db, "run-gone"), 1);
  assert.equal(await revokeRunKeys(fdb.db, "run-gone"), 0);
  const unknown = await statusAndBody(ask("efk-notarealkeynotarealkeynotarealkeynotarealk"));
  const gone = await statusAndBody(ask(revoked));
  const garbage = await statusAndBody(ask("sk-ant-something"));
  assert.equal(unknown.status, 401);
  assert.deepEqual(gone, unknown);
  assert.deepEqual(garbage, unknown);
  assert.deepEqual(unknown.body, {
    type: "error",
    error: { type: "authentication_error", message: "invalid x-api-key" },
  });

  const keyB = await createRunKey(fdb.db, "run-b");
  const otherRuns = await statusAndBody(ask(keyB, "sonnet-a"));
  const missing = await statusAndBody(ask(keyB, "sonnet-z"));
  assert.equal(otherRuns.status, 403);
  assert.equal(missing.status, 403);
  assert.equal(
    JSON.stringify(otherRuns.body).replace("sonnet-a", "X"),
    JSON.stringify(missing.body).replace("sonnet-z", "X"),
  );
  // OpenAI-shaped on the OpenAI wire.
  const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: keyB, maxRetries: 0 });
  const ok = await openai.chat.completions.create({
    model: "gpt-b",
    messages: [{ role: "user", content: "hi" }],
  });
  assert.equal(ok.choices[0]?.message.content, "hello there");
  const keyA = await createRunKey(fdb.db, "run-a");
  const denied = await statusAndBody(
    new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: keyA, maxRetries: 0 }).chat.completions.create({
      model: "gpt-b",
      messages: [{ role: "user", content: "hi" }],
    }),
  );
  assert.equal(denied.status, 403);
  assert.equal((denied.body as { code?: string }).code, "model_not_allowed");
});

test("spend log: one row per call with the metered cost, equal to the upstream's bill; reconciliation flags a gap", async () => {
  const key = await createRunKey(fdb.db, "run-log");
  const before = provider.bill().total.costNanoUsd;
  for (let i = 0; i < 3; i++)
    await ask(key, "sonnet-a", { [GatewayHeaders.cell]: "cell-1", [GatewayHeaders.trace]: `t${i}` });
  // A streamed call is metered from the stream it passes through untouched.
  const stream = anthropic(key).messages.stream(
    { model: "sonnet-a", max_tokens: 1000, messages: [{ role: "user", content: "hi" }] },
    { headers: { [GatewayHeaders.cell]: "cell-1" } },
  );
  const final = await stream.finalMessage();
  assert.equal(final.usage.output_tokens, 300);
  const billed = provider.bill().total.costNanoUsd - before;
  const rows = (
    await fdb.db.query<{ status: string; cost_nano_usd: number; output_tokens: number; cell_id: string }>(
      "SELECT status, cost_nano_usd, output_tokens, cell_id FROM gateway_spend_log WHERE run_name = 'run-log'",
    )
  ).rows;
  assert.equal(rows.length, 4);
  assert.ok(rows.every((r) => r.status === "ok" && r.output_tokens === 300 && r.cell_id === "cell-1"));
  const logged = rows.reduce((s, r) => s + Number(r.cost_nano_usd), 0);
  assert.equal(logged, billed);
  assert.equal(await runSpendNanoUsd(fdb.db, "run-log"), billed);

  const same = await reconcileAttempt(fdb.db, "run-log", "cell-1", billed, billed + 5_000);
  assert.equal(same.flagged, false);
  assert.equal(same.differenceNanoUsd, 0);
  const off = await reconcileAttempt(fdb.db, "run-log", "cell-1", billed - 1);
  assert.equal(off.flagged, true);
  assert.equal(off.differenceNanoUsd, 1);
  const row = (
    await fdb.db.query<{
      flagged: boolean;
      ledger_nano_usd: number;
      gateway_nano_usd: number;
      harness_reported_nano_usd: number | null;
    }>(
      "SELECT flagged, ledger_nano_usd, gateway_nano_usd, harness_reported_nano_usd FROM reconciliation_results WHERE run_name = 'run-log' AND cell_id = 'cell-1'",
    )
  ).rows[0]!;
  assert.equal(row.flagged, true);
  assert.equal(Number(row.gateway_nano_usd), billed);
  assert.equal(Number(row.ledger_nano_usd), billed - 1);
  assert.equal(row.harness_reported_nano_usd, null);
});

test("the run's spend cap (budget_usd) holds under 20 concurrent calls; over it, a provider-shaped 402", async () => {
  const oneCall = prices.cost("claude-sonnet-4-5", {
    inputTokens: 1200,
    outputTokens: 300,
    cacheReadTokens: 0,
    cacheWriteTokens: 0,
    cacheWrite1hTokens: 0,
    reasoningTokens: 0,
  }).costNanoUsd;
  const budgetUsd = (oneCall * 6) / 1e9; // reservations (max_tokens 1000) let fewer start at once; settles free room
  await saveRunMetadata(fdb.db, {
    runName: "run-cap",
    config: { name: "run-cap", budget_usd: budgetUsd },
    version: "test",
  });
  const key = await createRunKey(fdb.db, "run-cap");
  const before = provider.bill().byKey[UPSTREAM_KEY]?.costNanoUsd ?? 0;
  const results = await Promise.all(Array.from({ length: 20 }, () => statusAndBody(ask(key))));
  const ok = results.filter((r) => r.status === 200).length;
  // 402: the cap is spent; 529: the reservations of calls in flight are what is in the way (retry shortly)
  const waits = results.filter((r) => r.status === 529).length;
  let refused = results.filter((r) => r.status === 402);
  assert.equal(ok + refused.length + waits, 20);
  assert.ok(ok >= 1 && refused.length + waits >= 1, `ok ${ok}, refused ${refused.length}, waits ${waits}`);
  for (let i = 0; i < 12 && refused.length === 0; i++) {
    const r = await statusAndBody(ask(key));
    if (r.status === 402) refused = [r];
  }
  assert.ok(refused.length >= 1, "once the calls settle, the spent cap answers 402");
  const err = refused[0]!.body as { type: string; error: { type: string; message: string } };
  assert.equal(err.error.type, "billing_error");
  assert.match(err.error.message, /spend cap/);
  const spent = await runSpendNanoUsd(fdb.db, "run-cap");
  const billed = (provider.bill().byKey[UPSTREAM_KEY]?.costNanoUsd ?? 0) - before;
  assert.equal(spent, billed);
  assert.ok(spent <= budgetUsd * 1e9, `spent ${spent} nano-USD under a cap of ${budgetUsd * 1e9}`);
  // Sequential calls now: every one fits or is refused, never overspends.
  for (let i = 0; i < 8; i++) await statusAndBody(ask(key));
  assert.ok((await runSpendNanoUsd(fdb.db, "run-cap")) <= budgetUsd * 1e9);
});

test("rate-limit headers from the upstream reach the pool's pacer", () => {
  const limits = pacer.pool("cc__sonnet").bucket.currentLimits();
  assert.equal(limits.requestsPerMinute, 6000);
  assert.equal(limits.inputTokensPerMinute, 10_000_000);
  assert.equal(limits.outputTokensPerMinute, 1_000_000);
});

test("through a shim, every spend-log row carries the shim's cell and trace, whatever the harness sent", async () => {
  const { startShim } = await import("../../shim/index.js");
  const key = await createRunKey(fdb.db, "run-log");
  const shim = await startShim({
    upstream: gw.url,
    run: "run-log",
    cell: "h__m__t__r0",
    attempt: 0,
    providerKey: key,
    traceId: "h__m__t__r0",
    aliases: { "sonnet-a": "claude-sonnet-4-5" },
  });
  try {
    const client = new Anthropic({ baseURL: shim.url, apiKey: "dummy", maxRetries: 0 });
    await client.messages.create(
      { model: "sonnet-a", max_tokens: 100, messages: [{ role: "user", content: "hi" }] },
      { headers: { [GatewayHeaders.cell]: "someone-elses-cell" } },
    );
    const rows = await fdb.db.query<{ cell_id: string; trace_id: string }>(
      "SELECT cell_id, trace_id FROM gateway_spend_log WHERE run_name = 'run-log' AND cell_id IS NOT NULL ORDER BY created_at DESC LIMIT 1",
    );
    assert.deepEqual(rows.rows[0], { cell_id: "h__m__t__r0", trace_id: "h__m__t__r0" });
  } finally {
    await shim.close();
  }
});

test("the gateway's database failing before a call is forwarded is an overload the shim retries, unbilled", async () => {
  const key = await createRunKey(fdb.db, "run-a");
  let failures = 2;
  const flaky: Db = {
    kind: fdb.db.kind,
    query: (sql, params) =>
      failures-- > 0
        ? Promise.reject(new Error("connect ECONNREFUSED 127.0.0.1:5432"))
        : fdb.db.query(sql, params),
    transaction: (fn) => fdb.db.transaction(fn),
    close: async () => {},
  };
  const gw2 = await startGateway({
    db: flaky,
    aliases: {
      "sonnet-a": {
        upstream: { provider: "anthropic", baseUrl: provider.url, apiKey: UPSTREAM_KEY },
        model: "claude-sonnet-4-5",
      },
    },
  });
  const rows: LedgerCall[] = [];
  const shim = await startShim({
    upstream: gw2.url,
    run: "run-a",
    cell: "cell-flaky",
    attempt: 1,
    providerKey: key,
    aliases: { "sonnet-a": "claude-sonnet-4-5" },
    retry: { baseDelayMs: 10 },
    onLedgerRow: (r) => rows.push(r),
  });
  try {
    const direct = await fetch(`${gw2.url}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": key },
      body: '{"model":"sonnet-a","max_tokens":5,"messages":[]}',
    });
    assert.equal(direct.status, 529);
    assert.equal(direct.headers.get("retry-after"), "1");
    assert.match(await direct.text(), /overloaded_error/);
    failures = 2;
    const billedBefore = provider.calls().length;
    const msg = await new Anthropic({ baseURL: shim.url, apiKey: "dummy", maxRetries: 0 }).messages.create({
      model: "sonnet-a",
      max_tokens: 100,
      messages: [{ role: "user", content: "hi" }],
    });
    assert.equal(msg.content[0]?.type, "text");
    assert.deepEqual(
      rows.map((r) => [r.status, r.costNanoUsd > 0]),
      [
        ["overloaded", false],
        ["overloaded", false],
        ["ok", true],
      ],
    );
    assert.equal(provider.calls().length - billedBefore, 1, "the provider served the call once");
  } finally {
    await shim.close();
    await gw2.close();
  }
});
