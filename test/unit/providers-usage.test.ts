import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { AnthropicStreamMeter, anthropicJsonResult, anthropicUsage } from "../../providers/anthropic.js";
import { errorFromText, isOverload, isSpendLimit, shimError } from "../../providers/errors.js";
import {
  ChatStreamMeter,
  chatUsage,
  openaiJsonResult,
  ResponsesStreamMeter,
  responsesUsage,
} from "../../providers/openai.js";
import { type SseEvent, SseParser } from "../../providers/sse.js";

const ev = (event: string | undefined, data: unknown) =>
  `${event ? `event: ${event}\n` : ""}data: ${typeof data === "string" ? data : JSON.stringify(data)}\n\n`;

/** Feed `text` to a parser in the given chunk sizes and collect the events. */
function parse(text: string, sizes: number[] = [text.length]): SseEvent[] {
  const out: SseEvent[] = [];
  const p = new SseParser((e) => out.push(e));
  const buf = Buffer.from(text, "utf8");
  let i = 0;
  let k = 0;
  while (i < buf.length) {
    const n = Math.max(1, sizes[k++ % sizes.length] ?? 1);
    p.push(buf.subarray(i, i + n));
    i += n;
  }
  return out;
}

const ANTHROPIC_STREAM = [
  ev("message_start", {
    type: "message_start",
    message: {
      model: "claude-sonnet-4-5",
      usage: {
        input_tokens: 10,
        cache_creation_input_tokens: 200,
        cache_read_input_tokens: 3000,
        output_tokens: 1,
      },
    },
  }),
  ev("content_block_start", {
    type: "content_block_start",
    index: 0,
    content_block: { type: "text", text: "" },
  }),
  ev("ping", { type: "ping" }),
  ev("content_block_delta", {
    type: "content_block_delta",
    index: 0,
    delta: { type: "text_delta", text: "héllo wörld, " },
  }),
  ev("message_delta", { type: "message_delta", delta: {}, usage: { output_tokens: 5 } }),
  ev("content_block_delta", {
    type: "content_block_delta",
    index: 0,
    delta: { type: "text_delta", text: "more" },
  }),
  ev("content_block_stop", { type: "content_block_stop", index: 0 }),
  ev("message_delta", {
    type: "message_delta",
    delta: { stop_reason: "end_turn" },
    usage: { output_tokens: 42 },
  }),
  ev("message_stop", { type: "message_stop" }),
].join("");

function meterAnthropic(text: string, sizes?: number[]) {
  const m = new AnthropicStreamMeter();
  for (const e of parse(text, sizes)) m.onEvent(e);
  return m.result();
}

test("SSE parser: events survive any chunking, CRLF, comments and multi-line data; raw text is exact", () => {
  const text = `: comment\r\nevent: a\r\ndata: {"x":1}\r\n\r\ndata: line1\ndata: line2\n\nevent: é\ndata: ü\n\n`;
  const whole = parse(text);
  assert.deepEqual(
    whole.map((e) => [e.event, e.data]),
    [
      ["a", '{"x":1}'],
      ["", "line1\nline2"],
      ["é", "ü"],
    ],
  );
  assert.equal(whole.map((e) => e.raw).join(""), text);
  fc.assert(
    fc.property(fc.array(fc.integer({ min: 1, max: 7 }), { minLength: 1, maxLength: 10 }), (sizes) => {
      const got = parse(text, sizes);
      return JSON.stringify(got) === JSON.stringify(whole);
    }),
  );
});

test("Anthropic JSON: total input = input + cache writes + cache reads; 1h writes split out", () => {
  const u = anthropicUsage({
    input_tokens: 5,
    cache_creation_input_tokens: 100,
    cache_read_input_tokens: 1000,
    cache_creation: { ephemeral_5m_input_tokens: 60, ephemeral_1h_input_tokens: 40 },
    output_tokens: 7,
  });
  assert.deepEqual(u, {
    inputTokens: 1105,
    outputTokens: 7,
    cacheReadTokens: 1000,
    cacheWriteTokens: 100,
    cacheWrite1hTokens: 40,
    reasoningTokens: 0,
  });
  const r = anthropicJsonResult(
    JSON.stringify({
      model: "m",
      content: [{ type: "text", text: "x" }],
      usage: { input_tokens: 3, output_tokens: 2 },
    }),
  );
  assert.equal(r.complete, true);
  assert.equal(r.reported, true);
  assert.equal(r.usage.inputTokens, 3);
});

test("Anthropic stream: message_delta usage is cumulative (the last wins, never summed), at any chunking", () => {
  const whole = meterAnthropic(ANTHROPIC_STREAM);
  assert.equal(whole.complete, true);
  assert.equal(whole.reported, true);
  assert.equal(whole.model, "claude-sonnet-4-5");
  assert.deepEqual(whole.usage, {
    inputTokens: 3210,
    outputTokens: 42,
    cacheReadTokens: 3000,
    cacheWriteTokens: 200,
    cacheWrite1hTokens: 0,
    reasoningTokens: 0,
  });
  for (const sizes of [[1], [3, 17], [64]]) assert.deepEqual(meterAnthropic(ANTHROPIC_STREAM, sizes), whole);
});

test("Anthropic stream: a message_delta that restates input and cache figures replaces them", () => {
  const text =
    ev("message_start", {
      type: "message_start",
      message: { usage: { input_tokens: 10, output_tokens: 1 } },
    }) +
    ev("message_delta", {
      type: "message_delta",
      usage: { input_tokens: 12, cache_read_input_tokens: 50, output_tokens: 9 },
    }) +
    ev("message_stop", { type: "message_stop" });
  const r = meterAnthropic(text);
  assert.equal(r.usage.inputTokens, 62);
  assert.equal(r.usage.cacheReadTokens, 50);
  assert.equal(r.usage.outputTokens, 9);
});

test("Anthropic stream cut midway: input from message_start, output estimated from the content seen", () => {
  const cutAt = ANTHROPIC_STREAM.indexOf("event: message_delta");
  const r = meterAnthropic(ANTHROPIC_STREAM.slice(0, cutAt));
  assert.equal(r.complete, false);
  assert.equal(r.reported, false);
  assert.equal(r.usage.inputTokens, 3210);
  // "héllo wörld, " is 15 UTF-8 bytes: 4 tokens at 4 bytes a token
  assert.equal(r.usage.outputTokens, 4);
  // Cut after a message_delta: the larger of the reported and the seen figure.
  const cut2 = ANTHROPIC_STREAM.indexOf("event: content_block_stop");
  const r2 = meterAnthropic(ANTHROPIC_STREAM.slice(0, cut2));
  assert.equal(r2.usage.outputTokens, 5);
  assert.equal(r2.reported, false);
  // Cut before message_start: nothing seen.
  assert.equal(meterAnthropic("event: message_st").usage.inputTokens, 0);
});

test("Anthropic stream: an overloaded_error event before anything else is an overload, not content", () => {
  const r = meterAnthropic(
    ev("error", { type: "error", error: { type: "overloaded_error", message: "Overloaded" } }),
  );
  assert.equal(r.sawContent, false);
  assert.ok(isOverload(r.error));
  assert.equal(r.complete, false);
});

test("errors: both providers' shapes, spend limit detection, shim errors in each shape", () => {
  const spend = errorFromText(
    JSON.stringify({
      type: "error",
      error: {
        type: "rate_limit_error",
        message: "x",
        details: { error_code: "enforced_spend_limit_reached" },
      },
    }),
  );
  assert.ok(isSpendLimit(spend));
  assert.ok(
    !isSpendLimit(
      errorFromText(JSON.stringify({ type: "error", error: { type: "rate_limit_error", message: "x" } })),
    ),
  );
  assert.ok(
    isSpendLimit(
      errorFromText(
        JSON.stringify({ error: { message: "q", type: "insufficient_quota", code: "insufficient_quota" } }),
      ),
    ),
  );
  const a = shimError("anthropic", "budget_exceeded", "no money");
  assert.deepEqual(JSON.parse(a.body), {
    type: "error",
    error: { type: "billing_error", message: "no money" },
  });
  const o = shimError("openai", "overloaded", "busy");
  assert.equal(o.status, 503);
  assert.equal((JSON.parse(o.body) as { error: { message: string } }).error.message, "busy");
});

test("OpenAI chat: cached inside prompt, reasoning inside completion", () => {
  const u = chatUsage({
    prompt_tokens: 1000,
    completion_tokens: 300,
    prompt_tokens_details: { cached_tokens: 600 },
    completion_tokens_details: { reasoning_tokens: 200 },
  });
  assert.deepEqual(u, {
    inputTokens: 1000,
    outputTokens: 300,
    cacheReadTokens: 600,
    cacheWriteTokens: 0,
    cacheWrite1hTokens: 0,
    reasoningTokens: 200,
  });
  const r = openaiJsonResult(
    JSON.stringify({ model: "gpt-4o", choices: [{}], usage: { prompt_tokens: 5, completion_tokens: 1 } }),
    "chat",
  );
  assert.equal(r.usage.inputTokens, 5);
  assert.equal(r.model, "gpt-4o");
});

const chunk = (content: string | null, extra: Record<string, unknown> = {}) =>
  ev(undefined, {
    model: "gpt-4o",
    choices: content === null ? [] : [{ index: 0, delta: { content } }],
    usage: null,
    ...extra,
  });
const CHAT_STREAM =
  chunk("Hello") +
  chunk(" world") +
  ev(undefined, { model: "gpt-4o", choices: [], usage: { prompt_tokens: 9, completion_tokens: 2 } }) +
  "data: [DONE]\n\n";

test("OpenAI chat stream: the usage chunk is read, and hidden only from a client that did not ask", () => {
  for (const hide of [true, false]) {
    const m = new ChatStreamMeter(hide);
    const shown = parse(CHAT_STREAM).filter((e) => m.onEvent(e));
    assert.equal(shown.length, hide ? 3 : 4);
    assert.ok(!hide || !shown.some((e) => e.data.includes('"prompt_tokens"')));
    const r = m.result();
    assert.equal(r.complete, true);
    assert.equal(r.reported, true);
    assert.equal(r.usage.inputTokens, 9);
  }
});

test("OpenAI chat stream cut before the usage chunk: output estimated from content, input left to the caller", () => {
  const m = new ChatStreamMeter(true);
  for (const e of parse(chunk("Hello") + chunk(" world"))) m.onEvent(e);
  const r = m.result();
  assert.equal(r.reported, false);
  assert.equal(r.complete, false);
  assert.equal(r.usage.outputTokens, 3); // 11 bytes
  assert.equal(r.usage.inputTokens, 0);
});

test("Responses: usage from response.completed, with or without event: lines; cut streams estimated", () => {
  const usage = {
    input_tokens: 100,
    input_tokens_details: { cached_tokens: 40 },
    output_tokens: 30,
    output_tokens_details: { reasoning_tokens: 20 },
  };
  assert.deepEqual(responsesUsage(usage), {
    inputTokens: 100,
    outputTokens: 30,
    cacheReadTokens: 40,
    cacheWriteTokens: 0,
    cacheWrite1hTokens: 0,
    reasoningTokens: 20,
  });
  const events = [
    ["response.created", { type: "response.created", response: { model: "gpt-5", usage: null } }],
    ["response.output_text.delta", { type: "response.output_text.delta", delta: "abcdefgh" }],
    ["response.completed", { type: "response.completed", response: { model: "gpt-5", usage } }],
  ] as const;
  for (const named of [true, false]) {
    const m = new ResponsesStreamMeter();
    for (const e of parse(events.map(([n, d]) => ev(named ? n : undefined, d)).join(""))) m.onEvent(e);
    const r = m.result();
    assert.equal(r.complete, true);
    assert.equal(r.usage.cacheReadTokens, 40);
    assert.equal(r.model, "gpt-5");
  }
  const m = new ResponsesStreamMeter();
  for (const e of parse(
    events
      .slice(0, 2)
      .map(([n, d]) => ev(n, d))
      .join(""),
  ))
    m.onEvent(e);
  assert.equal(m.result().usage.outputTokens, 2);
  assert.equal(m.result().reported, false);
  const j = openaiJsonResult(JSON.stringify({ model: "gpt-5", output: [{}], usage }), "responses");
  assert.equal(j.usage.reasoningTokens, 20);
});
