import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { type Rig, RUN_KEY, readLedger, readProgress, startRig, sum } from "./shim-fixture.js";

describe("official SDKs through the shim", () => {
  let rig: Rig;
  let anthropic: Anthropic;
  let openai: OpenAI;
  before(async () => {
    rig = await startRig();
    anthropic = new Anthropic({ baseURL: rig.shim.url, apiKey: "dummy", maxRetries: 0 });
    openai = new OpenAI({ baseURL: `${rig.shim.url}/v1`, apiKey: "dummy", maxRetries: 0 });
  });
  after(async () => {
    await rig.close();
  });

  test("anthropic: non-streaming text, with cache tokens", async () => {
    rig.provider.setScenario({
      text: "hello there",
      usage: { input: 100, cacheRead: 1000, cacheWrite5m: 50, output: 7 },
    });
    const msg = await anthropic.messages.create({
      model: "claude-sonnet-4-6",
      max_tokens: 100,
      messages: [{ role: "user", content: "hi" }],
    });
    assert.equal(msg.content[0]?.type === "text" ? msg.content[0].text : "", "hello there");
    assert.equal(msg.usage.cache_read_input_tokens, 1000);
  });

  test("anthropic: streaming tool call, passed through unchanged", async () => {
    rig.provider.setScenario({
      text: "let me write",
      toolCalls: [{ name: "Write", input: { file_path: "/x", content: "y" } }],
    });
    const stream = anthropic.messages.stream({
      model: "claude-sonnet-4-6",
      max_tokens: 100,
      messages: [{ role: "user", content: "write" }],
      tools: [{ name: "Write", input_schema: { type: "object", properties: {} } }],
    });
    const final = await stream.finalMessage();
    const tool = final.content.find((c) => c.type === "tool_use");
    assert.ok(tool && tool.type === "tool_use");
    assert.deepEqual(tool.input, { file_path: "/x", content: "y" });
    assert.equal(final.stop_reason, "tool_use");
  });

  test("anthropic: 429 and 529 are retried, the client sees only the success", async () => {
    rig.provider.setScenario([
      { error: { status: 429, retryAfterS: 0 } },
      { error: { status: 529 } },
      { overloadedInStream: true },
      { text: "finally" },
    ]);
    const stream = anthropic.messages.stream({
      model: "claude-sonnet-4-6",
      max_tokens: 50,
      messages: [{ role: "user", content: "x" }],
    });
    const final = await stream.finalMessage();
    assert.equal(final.content[0]?.type === "text" ? final.content[0].text : "", "finally");
  });

  test("anthropic: a 400 is passed through as the SDK's error", async () => {
    rig.provider.setScenario({ error: { status: 400, message: "bad thing" } });
    await assert.rejects(
      anthropic.messages.create({
        model: "claude-sonnet-4-6",
        max_tokens: 10,
        messages: [{ role: "user", content: "x" }],
      }),
      (err: unknown) => err instanceof Anthropic.BadRequestError && /bad thing/.test(err.message),
    );
  });

  test("anthropic: a stream cut midway reaches the client as an error and the ledger as estimated", async () => {
    rig.provider.setScenario({ text: "a".repeat(400), cutAfterDeltas: 10 });
    const stream = anthropic.messages.stream({
      model: "claude-sonnet-4-6",
      max_tokens: 500,
      messages: [{ role: "user", content: "x" }],
    });
    await assert.rejects(stream.finalMessage());
  });

  test("openai chat: non-streaming tool call", async () => {
    rig.provider.setScenario({
      toolCalls: [{ name: "get_weather", input: { city: "Paris" } }],
      usage: { cacheRead: 64 },
    });
    const r = await openai.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "weather?" }],
      tools: [
        {
          type: "function",
          function: { name: "get_weather", parameters: { type: "object", properties: {} } },
        },
      ],
    });
    const tc = r.choices[0]?.message.tool_calls?.[0];
    assert.ok(tc && tc.type === "function");
    assert.equal(tc.function.name, "get_weather");
    assert.deepEqual(JSON.parse(tc.function.arguments), { city: "Paris" });
  });

  test("openai chat: a stream that did not ask for usage never sees the usage chunk, but the ledger has it", async () => {
    rig.provider.setScenario({ text: "streamed words here", usage: { input: 30, output: 5 } });
    const stream = await openai.chat.completions.create({
      model: "gpt-4o-mini",
      stream: true,
      messages: [{ role: "user", content: "hi" }],
    });
    let text = "";
    let usageChunks = 0;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      if (chunk.usage) usageChunks++;
    }
    assert.equal(text, "streamed words here");
    assert.equal(usageChunks, 0);
    const served = rig.provider.calls().at(-1)!;
    assert.deepEqual(served.body.stream_options, { include_usage: true });
  });

  test("openai chat: a stream that asked for usage gets it", async () => {
    rig.provider.setScenario({ text: "abc", usage: { input: 10, output: 2 } });
    const stream = await openai.chat.completions.create({
      model: "gpt-4o-mini",
      stream: true,
      stream_options: { include_usage: true },
      messages: [{ role: "user", content: "hi" }],
    });
    let usage: unknown;
    for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
    assert.equal((usage as { prompt_tokens: number }).prompt_tokens, 10);
  });

  test("openai responses: streaming function call and non-streaming text", async () => {
    rig.provider.setScenario({
      toolCalls: [{ name: "exec_command", input: { cmd: "ls" } }],
      usage: { reasoning: 3, output: 9 },
    });
    const stream = await openai.responses.create({ model: "gpt-5", input: "list files", stream: true });
    let args = "";
    let completed = false;
    for await (const ev of stream) {
      if (ev.type === "response.function_call_arguments.done") args = ev.arguments;
      if (ev.type === "response.completed") completed = true;
    }
    assert.ok(completed);
    assert.deepEqual(JSON.parse(args), { cmd: "ls" });
    rig.provider.setScenario({ text: "plain answer" });
    const r = await openai.responses.create({ model: "gpt-5", input: "hi" });
    assert.equal(r.output_text, "plain answer");
  });

  test("openai: a 503 is retried; the spend-limit 429 is terminal and ends the session", async () => {
    rig.provider.setScenario([{ error: { status: 503 } }, { text: "ok after 503" }]);
    const r = await openai.chat.completions.create({
      model: "gpt-4o",
      messages: [{ role: "user", content: "x" }],
    });
    assert.equal(r.choices[0]?.message.content, "ok after 503");
    // The spend limit on a rig of its own: it ends that shim's session, and this file's rig must keep serving.
    const limited = await startRig(
      { run: "spend-openai" },
      { scenario: { error: { status: 429, spendLimit: true } } },
    );
    try {
      const client = new OpenAI({ baseURL: `${limited.shim.url}/v1`, apiKey: "dummy", maxRetries: 0 });
      const ask = () =>
        client.chat.completions.create({ model: "gpt-4o", messages: [{ role: "user", content: "x" }] });
      await assert.rejects(ask(), (e: unknown) => e instanceof OpenAI.APIError && e.status === 402);
      await assert.rejects(ask(), (e: unknown) => e instanceof OpenAI.APIError && e.status === 402);
      assert.equal(
        limited.provider.calls().length,
        1,
        "the spend-limit 429 was not retried, nor any call after it",
      );
      assert.equal(limited.shim.totals().capReason, "budget_exceeded");
    } finally {
      await limited.close();
    }
  });

  test("ledger: one row per try, with the provider's bill, no secrets; progress key written", async () => {
    await rig.shim.drain();
    const rows = await readLedger(rig.nc, "run1");
    const totals = rig.shim.totals();
    assert.equal(rows.length, totals.calls);
    assert.equal(new Set(rows.map((r) => r.callId)).size, rows.length);
    const bill = rig.provider.bill();
    assert.equal(
      sum(rows, (r) => r.costNanoUsd),
      bill.total.costNanoUsd,
    );
    assert.equal(totals.costNanoUsd, bill.total.costNanoUsd);
    assert.equal(
      sum(rows, (r) => r.inputTokens),
      bill.total.inputTokens,
    );
    assert.equal(
      sum(rows, (r) => r.outputTokens),
      bill.total.outputTokens,
    );
    assert.equal(
      sum(rows, (r) => r.cacheReadTokens),
      bill.total.cacheReadTokens,
    );
    assert.deepEqual(Object.keys(bill.byKey), [RUN_KEY]);
    const statuses = rows.map((r) => r.status);
    for (const s of ["ok", "rate_limited", "overloaded", "error", "cut"])
      assert.ok(statuses.includes(s as never), s);
    assert.ok(
      rows.some((r) => r.status === "cut" && r.estimated && r.outputTokens === 10 && r.costNanoUsd > 0),
    );
    const text = JSON.stringify(rows);
    assert.ok(!text.includes(RUN_KEY) && !text.includes("dummy"));
    const progress = await readProgress(rig.nc, "run1", "cell1");
    assert.equal(progress?.usage.costNanoUsd, bill.total.costNanoUsd);
    assert.equal(progress?.usage.calls, rows.length);
    for (const c of rig.provider.calls()) assert.equal(c.key, RUN_KEY);
  });
});
