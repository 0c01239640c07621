import assert from "node:assert/strict";
import { test } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import { request } from "undici";
import { startScriptedProvider } from "../../scripted-provider/index.js";
import type { CapEvent } from "../../shim/index.js";
import { RUN_KEY, readLedger, startRig } from "./shim-fixture.js";

const post = (url: string, path: string, body: unknown, headers: Record<string, string>) =>
  request(`${url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });

test("scripted provider: its own RPM bucket, the providers' rate-limit headers, 429 with retry-after, /_bill", async () => {
  const sp = await startScriptedProvider({
    limits: { rpm: 2, inputTpm: 100_000, outputTpm: 50_000 },
    scenario: { text: "hi" },
  });
  try {
    const a = await post(
      sp.url,
      "/v1/messages",
      { model: "claude-haiku-4-5", max_tokens: 5, messages: [] },
      { "x-api-key": "k1" },
    );
    await a.body.text();
    assert.equal(a.statusCode, 200);
    assert.equal(a.headers["anthropic-ratelimit-requests-limit"], "2");
    assert.equal(a.headers["anthropic-ratelimit-requests-remaining"], "1");
    assert.match(String(a.headers["anthropic-ratelimit-input-tokens-reset"]), /^\d{4}-\d\d-\d\dT/);
    const o = await post(
      sp.url,
      "/v1/chat/completions",
      { model: "gpt-4o", messages: [] },
      { authorization: "Bearer k2" },
    );
    await o.body.text();
    assert.equal(o.headers["x-ratelimit-limit-requests"], "2");
    assert.match(String(o.headers["x-ratelimit-reset-tokens"]), /^\d+(ms|s|m\d+s)$/);
    await (
      await post(
        sp.url,
        "/v1/messages",
        { model: "claude-haiku-4-5", max_tokens: 5, messages: [] },
        { "x-api-key": "k1" },
      )
    ).body.text();
    const limited = await post(
      sp.url,
      "/v1/messages",
      { model: "claude-haiku-4-5", max_tokens: 5, messages: [] },
      { "x-api-key": "k1" },
    );
    const body = (await limited.body.json()) as { error: { type: string } };
    assert.equal(limited.statusCode, 429);
    assert.equal(body.error.type, "rate_limit_error");
    assert.ok(Number(limited.headers["retry-after"]) >= 1);
    const bill = (await (await request(`${sp.url}/_bill`)).body.json()) as {
      byKey: Record<string, { calls: number }>;
    };
    assert.deepEqual(bill, JSON.parse(JSON.stringify(sp.bill())));
    assert.equal(bill.byKey.k1?.calls, 2);
    assert.equal(bill.byKey.k2?.calls, 1);
  } finally {
    await sp.close();
  }
});

test("through the shim, the provider's 429s are waited out (retry-after honoured); the client never sees one", {
  timeout: 60_000,
}, async () => {
  const rig = await startRig({ run: "rl" }, { limits: { rpm: 60 }, scenario: { text: "ok" } });
  try {
    const client = new Anthropic({ baseURL: rig.shim.url, apiKey: "dummy", maxRetries: 0 });
    const t0 = Date.now();
    // 60 rpm = a request a second after the first 60: call 61 and 62 need a wait.
    const all = await Promise.all(
      Array.from({ length: 62 }, () =>
        client.messages.create({
          model: "claude-haiku-4-5",
          max_tokens: 5,
          messages: [{ role: "user", content: "x" }],
        }),
      ),
    );
    assert.equal(all.length, 62);
    assert.ok(Date.now() - t0 >= 900);
    await rig.shim.drain();
    const rows = await readLedger(rig.nc, "rl");
    assert.equal(rows.filter((r) => r.status === "ok").length, 62);
    assert.ok(rows.some((r) => r.status === "rate_limited" && r.httpStatus === 429 && r.costNanoUsd === 0));
  } finally {
    await rig.close();
  }
});

test("a spend-limit 429 is terminal: not retried, the session ends as budget_exceeded, later calls are refused", async () => {
  const rig = await startRig({ run: "spend" }, { scenario: { error: { status: 429, spendLimit: true } } });
  try {
    const client = new Anthropic({ baseURL: rig.shim.url, apiKey: "dummy", maxRetries: 0 });
    const cap = new Promise<CapEvent>((resolve) => rig.shim.onCapReached(resolve));
    const ask = () =>
      client.messages.create({
        model: "claude-haiku-4-5",
        max_tokens: 5,
        messages: [{ role: "user", content: "x" }],
      });
    await assert.rejects(ask(), (e: unknown) => e instanceof Anthropic.APIError && e.status === 402);
    assert.equal((await cap).reason, "budget_exceeded");
    assert.equal(
      rig.shim.totals().infraStop,
      "provider_spend_limit",
      "the provider's limit, not the run's cap",
    );
    await assert.rejects(ask(), (e: unknown) => e instanceof Anthropic.APIError && e.status === 402);
    assert.equal(rig.provider.calls().length, 1, "no retry of a spend limit, no call after the cap");
    // count_tokens and other paths still pass through with the run's key
    const counted = await client.messages.countTokens({
      model: "claude-haiku-4-5",
      messages: [{ role: "user", content: "hello" }],
    });
    assert.ok(counted.input_tokens > 0);
    await rig.shim.drain();
    const rows = await readLedger(rig.nc, "spend");
    assert.deepEqual(
      rows.map((r) => [r.status, r.httpStatus]),
      [
        ["error", 429],
        ["refused", null],
      ],
    );
    assert.ok(!JSON.stringify(rows).includes(RUN_KEY));
  } finally {
    await rig.close();
  }
});

test("429s past the shim's retries are an infrastructure stop the attempt reports, not the model's", async () => {
  const rig = await startRig(
    { run: "exhausted", retry: { baseDelayMs: 1, maxDelayMs: 5, maxRetries: 2 } },
    { scenario: { error: { status: 429 } } },
  );
  try {
    const client = new Anthropic({ baseURL: rig.shim.url, apiKey: "dummy", maxRetries: 0 });
    assert.equal(rig.shim.totals().infraStop, null);
    await assert.rejects(
      client.messages.create({
        model: "claude-haiku-4-5",
        max_tokens: 5,
        messages: [{ role: "user", content: "x" }],
      }),
      (e: unknown) => e instanceof Anthropic.APIError,
    );
    assert.equal(rig.provider.calls().length, 3, "the first try and two retries");
    assert.equal(rig.shim.totals().infraStop, "rate_limit_exhausted");
    assert.equal(rig.shim.totals().capReason, null, "not a cap: the harness may still go on");
  } finally {
    await rig.close();
  }
});

test("a harness naming a model nothing prices (a JavaScript object property too) is refused before it is forwarded", async () => {
  const rig = await startRig(
    { run: "proto", aliases: { sonnet: "claude-sonnet-4-5" } },
    { scenario: { text: "ok" } },
  );
  try {
    const client = new Anthropic({ baseURL: rig.shim.url, apiKey: "dummy", maxRetries: 0 });
    for (const model of ["constructor", "__proto__", "toString", "hasOwnProperty", "claude-opus-9"]) {
      await assert.rejects(
        client.messages.create({ model, max_tokens: 5, messages: [{ role: "user", content: "x" }] }),
        (e: unknown) =>
          e instanceof Anthropic.BadRequestError && /no price for model/.test(String((e as Error).message)),
        model,
      );
    }
    // a model the data prices goes through
    await client.messages.create({
      model: "claude-sonnet-4-5",
      max_tokens: 5,
      messages: [{ role: "user", content: "x" }],
    });
    await rig.shim.drain();
    assert.equal(rig.provider.calls().length, 1, "nothing unpriced reached the provider");
    assert.equal(rig.shim.totals().refused, 5);
    const rows = await readLedger(rig.nc, "proto");
    assert.deepEqual(
      rows.map((r) => r.alias),
      ["claude-sonnet-4-5"],
    );
    assert.equal(rows[0]?.costNanoUsd, rig.provider.bill().total.costNanoUsd);
  } finally {
    await rig.close();
  }
});
