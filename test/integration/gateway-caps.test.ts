/**
 * Caps that hold at the gateway, whatever the caller (the shim, or a harness that got hold of its key): a key per
 * attempt capped at max_cost_usd and bound to its cell's model, the run's cap counting platform cells only (a
 * subscription cell neither uses it up nor is stopped by it), worst-case reservations, requests that cannot be priced
 * refused, and the shim ending the session as budget_exceeded on the gateway's 402.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { type Gateway, startGateway } from "../../gateway/server.js";
import { PriceTable } from "../../providers/pricing.js";
import { type ScriptedProvider, startScriptedProvider } from "../../scripted-provider/index.js";
import { type CapEvent, startShim } from "../../shim/index.js";
import { createAttemptKey, createRunKey, hashKey, revokeAttemptKeys } from "../../store/keys.js";
import { saveRunMetadata } from "../../store/results.js";
import { runBillableSpendNanoUsd, runSpendNanoUsd } from "../../store/spend.js";
import { type FreshDb, freshDb } from "../helpers/db.js";

const UPSTREAM_KEY = "sk-upstream-only-the-gateway-holds";
let fdb: FreshDb;
let provider: ScriptedProvider;
let gw: Gateway;

before(async () => {
  fdb = await freshDb("gateway_caps");
  provider = await startScriptedProvider({
    keys: [UPSTREAM_KEY],
    scenario: { text: "a reply of some length", usage: { input: 2000, output: 500 } },
  });
  const up = { provider: "anthropic" as const, baseUrl: provider.url, apiKey: UPSTREAM_KEY };
  const upO = { provider: "openai" as const, baseUrl: provider.url, apiKey: UPSTREAM_KEY };
  gw = await startGateway({
    db: fdb.db,
    aliases: {
      "sonnet-a": { upstream: up, model: "claude-sonnet-4-5" },
      "haiku-a": { upstream: up, model: "claude-haiku-4-5" },
      "gpt-a": { upstream: upO, model: "gpt-5" },
    },
  });
});
after(async () => {
  await gw.close();
  await provider.close();
  await fdb.cleanup();
});

const nano = (usd: number) => Math.round(usd * 1e9);
/** One scripted call on claude-sonnet-4-5: 2000 in at $3, 500 out at $15 per Mtok. */
const ONE_CALL = 2000 * 3000 + 500 * 15_000;

async function status(p: Promise<unknown>): Promise<{ status: number; message: string }> {
  try {
    await p;
    return { status: 200, message: "" };
  } catch (err) {
    if (err instanceof Anthropic.APIError || err instanceof OpenAI.APIError) {
      // The provider-shaped body's own message (Anthropic: {error:{message}}, OpenAI: the error object itself).
      const body = err.error as { message?: unknown; error?: { message?: unknown } } | undefined;
      const message = body?.error?.message ?? body?.message ?? err.message;
      return { status: err.status ?? 0, message: String(message) };
    }
    throw err;
  }
}

/**
 * A call's status once the calls before it have settled: the gateway answers 529 "retry shortly" while an earlier
 * call's reservation (its spend-log write follows its answer) still holds the remaining budget, as a client retries.
 */
async function untilSettled(call: () => Promise<unknown>): Promise<{ status: number; message: string }> {
  for (let i = 0; ; i++) {
    const r = await status(call());
    if (r.status !== 529 || i >= 50) return r;
    await new Promise((done) => setTimeout(done, 50));
  }
}

const ask = (key: string, model = "sonnet-a", maxTokens = 1000) =>
  new Anthropic({ baseURL: gw.url, apiKey: key, maxRetries: 0 }).messages.create({
    model,
    max_tokens: maxTokens,
    messages: [{ role: "user", content: "hello" }],
  });

async function keySpend(key: string): Promise<number> {
  const r = await fdb.db.query<{ s: string }>(
    "SELECT COALESCE(SUM(cost_nano_usd), 0)::text AS s FROM gateway_spend_log WHERE key_hash = $1",
    [hashKey(key)],
  );
  return Number(r.rows[0]?.s ?? 0);
}

test("an attempt's key holds its max_cost_usd against 20 concurrent calls made without any shim", async () => {
  await saveRunMetadata(fdb.db, { runName: "att", config: { name: "att" }, version: "test" });
  const cap = 3 * ONE_CALL + ONE_CALL / 2;
  const key = await createAttemptKey(fdb.db, {
    run: "att",
    cellId: "h__sonnet-a__t__r0",
    attempt: 0,
    models: ["sonnet-a"],
    capNanoUsd: cap,
    exempt: false,
  });
  const before = provider.bill().byKey[UPSTREAM_KEY]?.costNanoUsd ?? 0;
  // Each as a client makes it: the gateway's 529 "retry shortly" (calls in flight hold what is left) is retried.
  const results = await Promise.all(Array.from({ length: 20 }, () => untilSettled(() => ask(key))));
  const refused = results.filter((r) => r.status === 402);
  assert.ok(refused.length >= 1, "the cap refused calls");
  assert.match(refused[0]!.message, /attempt spend cap of \$0\.0\d+ reached/);
  for (let i = 0; i < 6; i++) await status(ask(key));
  const billed = (provider.bill().byKey[UPSTREAM_KEY]?.costNanoUsd ?? 0) - before;
  assert.ok(billed > 0);
  assert.ok(billed <= cap, `the provider billed ${billed} nano-USD for a key capped at ${cap}`);
  assert.equal(await keySpend(key), billed, "the spend log settled to the bill");
  // every row is the attempt's, whatever cell header a caller might send
  const cells = await fdb.db.query<{ cell_id: string; attempt: number }>(
    "SELECT DISTINCT cell_id, attempt FROM gateway_spend_log WHERE key_hash = $1",
    [hashKey(key)],
  );
  assert.deepEqual(cells.rows, [{ cell_id: "h__sonnet-a__t__r0", attempt: 0 }]);
});

test("an attempt's key calls only its cell's model, and dies with its attempt", async () => {
  await saveRunMetadata(fdb.db, { runName: "bound", config: { name: "bound" }, version: "test" });
  const key = await createAttemptKey(fdb.db, {
    run: "bound",
    cellId: "c",
    attempt: 2,
    models: ["haiku-a"],
    capNanoUsd: null,
    exempt: false,
  });
  assert.equal((await status(ask(key, "haiku-a"))).status, 200);
  const other = await status(ask(key, "sonnet-a"));
  assert.equal(other.status, 403);
  assert.match(other.message, /may not use model "sonnet-a"/);
  assert.equal(await revokeAttemptKeys(fdb.db, "bound", "c", 2), 1);
  assert.equal((await status(ask(key, "haiku-a"))).status, 401);
});

test("the run cap counts platform cells only: an exempt (subscription) cell neither uses it up nor is stopped", async () => {
  const budget = 4 * ONE_CALL;
  await saveRunMetadata(fdb.db, {
    runName: "mixed",
    config: { name: "mixed", budget_usd: budget / 1e9 },
    version: "test",
  });
  const attemptKey = (cellId: string, exempt: boolean) =>
    createAttemptKey(fdb.db, {
      run: "mixed",
      cellId,
      attempt: 0,
      models: ["sonnet-a"],
      capNanoUsd: null,
      exempt,
    });
  const sub = await attemptKey("h__sub__t__r0", true);
  const plat = await attemptKey("h__plat__t__r0", false);
  // The subscription cell spends more than the whole budget first: none of it counts.
  for (let i = 0; i < 6; i++) assert.equal((await status(ask(sub))).status, 200, `exempt call ${i}`);
  assert.equal(await runBillableSpendNanoUsd(fdb.db, "mixed"), 0);
  // The platform cell gets the whole budget, then a 402.
  const plat402: string[] = [];
  for (let i = 0; i < 8; i++) {
    const r = await untilSettled(() => ask(plat));
    if (r.status === 402) plat402.push(r.message);
    else assert.equal(r.status, 200);
  }
  assert.ok(plat402.length >= 1, "the platform cell met the run cap");
  assert.match(plat402[0]!, /run spend cap of \$0\.0\d+ reached/);
  const billable = await runBillableSpendNanoUsd(fdb.db, "mixed");
  assert.ok(billable > 2 * ONE_CALL && billable <= budget, `billable ${billable} of a ${budget} cap`);
  // Past the cap, the exempt cell is still served; the total includes it, the billable figure does not.
  assert.equal((await status(ask(sub))).status, 200);
  assert.equal(await runBillableSpendNanoUsd(fdb.db, "mixed"), billable);
  assert.ok((await runSpendNanoUsd(fdb.db, "mixed")) > budget);
});

test("a call whose worst case does not fit is clamped to what is left, never forwarded to overspend", async () => {
  await saveRunMetadata(fdb.db, { runName: "clamp", config: { name: "clamp" }, version: "test" });
  const prices = new PriceTable();
  // Room for the input's worst case and some output, not for max_tokens 20000 at $15 / Mtok.
  const key = await createAttemptKey(fdb.db, {
    run: "clamp",
    cellId: "c",
    attempt: 0,
    models: ["sonnet-a"],
    capNanoUsd: nano(0.05),
    exempt: false,
  });
  const before = provider.calls().length;
  assert.equal((await untilSettled(() => ask(key, "sonnet-a", 20_000))).status, 200);
  const sent = provider.calls().slice(before);
  assert.equal(sent.length, 1);
  const clamped = sent[0]?.body.max_tokens as number;
  assert.ok(clamped > 0 && clamped < 20_000, `max_tokens ${clamped}`);
  // the clamp is exactly what the cap pays for at worst-case rates
  // (the request as the SDK sent it: every byte a token, plus 2048 the provider may add)
  const asked = JSON.stringify({
    model: "sonnet-a",
    max_tokens: 20_000,
    messages: [{ role: "user", content: "hello" }],
  });
  const worst = (out: number) =>
    prices.worstCaseNanoUsd("claude-sonnet-4-5", {
      inputTokens: Buffer.byteLength(asked) + 2048,
      outputTokens: out,
      cacheWrites: "none",
    });
  assert.ok(worst(clamped) <= BigInt(nano(0.05)), `clamped to ${clamped}: ${worst(clamped)} nano-USD`);
  assert.ok(worst(clamped + 1) > BigInt(nano(0.05)), "one more token would not fit");
});

test("requests that cannot be priced beforehand are refused with the reason, and never forwarded", async () => {
  await saveRunMetadata(fdb.db, { runName: "feat", config: { name: "feat" }, version: "test" });
  const key = await createRunKey(fdb.db, "feat");
  const before = provider.calls().length;
  const anthropic = new Anthropic({ baseURL: gw.url, apiKey: key, maxRetries: 0 });
  const web = await status(
    anthropic.messages.create({
      model: "sonnet-a",
      max_tokens: 100,
      messages: [{ role: "user", content: "search" }],
      tools: [{ type: "web_search_20250305", name: "web_search", max_uses: 5 }],
    }),
  );
  assert.equal(web.status, 400);
  assert.match(web.message, /server-side tool "web_search_20250305" \(billed per use\)/);
  const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 });
  const cases: Array<[() => Promise<unknown>, RegExp]> = [
    [
      () =>
        openai.chat.completions.create({ model: "gpt-a", n: 3, messages: [{ role: "user", content: "x" }] }),
      /n = 3/,
    ],
    [() => openai.responses.create({ model: "gpt-a", input: "x", background: true }), /background response/],
    [
      () => openai.responses.create({ model: "gpt-a", input: "x", tools: [{ type: "web_search_preview" }] }),
      /web_search_preview/,
    ],
    [
      () =>
        openai.chat.completions.create({
          model: "gpt-a",
          service_tier: "priority",
          messages: [{ role: "user", content: "x" }],
        }),
      /service_tier "priority"/,
    ],
  ];
  // One at a time, each made when it is awaited: a refusal never waits unhandled behind another.
  for (const [call, why] of cases) {
    const r = await status(call());
    assert.equal(r.status, 400);
    assert.match(r.message, why);
    assert.match(r.message, /no spend cap could hold/);
  }
  assert.equal(provider.calls().length, before, "nothing reached the provider");
});

test("through a shim: the gateway's 402 ends the session as budget_exceeded", async () => {
  await saveRunMetadata(fdb.db, { runName: "shim402", config: { name: "shim402" }, version: "test" });
  const key = await createAttemptKey(fdb.db, {
    run: "shim402",
    cellId: "c",
    attempt: 0,
    models: ["sonnet-a"],
    capNanoUsd: 2 * ONE_CALL,
    exempt: false,
  });
  // The shim itself is uncapped: only the gateway's cap stops this attempt.
  const shim = await startShim({
    upstream: gw.url,
    run: "shim402",
    cell: "c",
    attempt: 0,
    providerKey: key,
    aliases: { "sonnet-a": "claude-sonnet-4-5" },
  });
  try {
    const capped = new Promise<CapEvent>((resolve) => shim.onCapReached(resolve));
    const client = new Anthropic({ baseURL: shim.url, apiKey: "dummy", maxRetries: 0 });
    let last = { status: 200, message: "" };
    for (let i = 0; i < 6 && last.status === 200; i++)
      last = await status(
        client.messages.create({
          model: "sonnet-a",
          max_tokens: 1000,
          messages: [{ role: "user", content: "x" }],
        }),
      );
    assert.equal(last.status, 402);
    assert.match(last.message, /spend cap is reached/);
    assert.equal((await capped).reason, "budget_exceeded");
    assert.equal(shim.totals().capReason, "budget_exceeded");
    assert.ok((await keySpend(key)) <= 2 * ONE_CALL);
  } finally {
    await shim.close();
  }
});
