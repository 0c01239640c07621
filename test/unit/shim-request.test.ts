import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { routeOf } from "../../providers/routes.js";
import { clamp, parseCall, upstreamBody } from "../../shim/request.js";

const chat = routeOf("/v1/chat/completions")!;
const body = (b: Buffer) => JSON.parse(b.toString("utf8")) as Record<string, unknown>;

describe("request rewriting for metering", () => {
  it("adds include_usage to a chat stream without re-serialising the conversation", () => {
    const text = ` \n{"model":"gpt-5","stream":true,"messages":[{"role":"user","content":"héllo \\"x\\""}]}`;
    const call = parseCall(chat, Buffer.from(text));
    assert.ok(typeof call !== "string");
    assert.equal(call.hideUsage, true);
    const out = upstreamBody(call);
    assert.deepEqual(body(out), { ...body(Buffer.from(text)), stream_options: { include_usage: true } });
    // the original bytes are kept verbatim after the inserted member
    assert.ok(out.toString("utf8").endsWith(text.slice(text.indexOf("{") + 1)));
  });

  for (const so of ['{"include_usage":false}', "null", '"weird"', "{}"]) {
    it(`stream_options: ${so} is rewritten, never duplicated`, () => {
      const call = parseCall(chat, Buffer.from(`{"model":"m","stream":true,"stream_options":${so}}`));
      assert.ok(typeof call !== "string");
      const text = upstreamBody(call).toString("utf8");
      assert.equal(text.split('"stream_options"').length, 2, text);
      assert.deepEqual(
        (body(Buffer.from(text)).stream_options as Record<string, unknown>).include_usage,
        true,
      );
    });
  }

  it("a client that asked for usage gets its bytes untouched and sees the usage chunk", () => {
    const raw = Buffer.from('{"model":"m","stream":true,"stream_options":{"include_usage":true}}');
    const call = parseCall(chat, raw);
    assert.ok(typeof call !== "string");
    assert.equal(call.hideUsage, false);
    assert.equal(upstreamBody(call), raw);
  });

  it("a clamp after the splice decision still sends include_usage and the clamped cap", () => {
    const call = parseCall(chat, Buffer.from('{"model":"m","stream":true,"max_tokens":9000}'));
    assert.ok(typeof call !== "string");
    clamp(call, 100);
    const sent = body(upstreamBody(call));
    assert.equal(sent.max_tokens, 100);
    assert.deepEqual(sent.stream_options, { include_usage: true });
  });
});

describe("reading a request without parsing the conversation", () => {
  const messages = routeOf("/v1/messages")!;
  const responses = routeOf("/v1/responses")!;

  it("reads what JSON.parse reads, for any object and any layout, and sends the bytes untouched", () => {
    const member = fc.oneof(
      fc.constantFrom("model", "stream", "max_tokens", "max_output_tokens", "thinking", "messages"),
      fc.string(),
    );
    fc.assert(
      fc.property(
        fc.dictionary(member, fc.jsonValue(), { maxKeys: 8 }),
        fc.constantFrom(undefined, 0, 2, "\t"),
        (obj, indent) => {
          const raw = Buffer.from(JSON.stringify(obj, null, indent));
          const call = parseCall(messages, raw);
          assert.ok(typeof call !== "string", String(call));
          const want = JSON.parse(raw.toString("utf8")) as Record<string, unknown>;
          assert.equal(call.model, typeof want.model === "string" ? want.model : "");
          assert.equal(call.stream, want.stream === true);
          const cap = ["max_tokens", "max_completion_tokens", "max_output_tokens"].find(
            (f) => typeof want[f] === "number",
          );
          assert.equal(call.maxTokens, cap === undefined ? undefined : want[cap]);
          assert.equal(upstreamBody(call), raw);
        },
      ),
      { numRuns: 500 },
    );
  });

  it("a clamp changes only the cap (and a thinking budget above it), for any object", () => {
    fc.assert(
      fc.property(
        fc.dictionary(fc.string(), fc.jsonValue(), { maxKeys: 6 }),
        fc.option(fc.integer({ min: 1, max: 100_000 }), { nil: undefined }),
        fc.option(fc.integer({ min: 0, max: 100_000 }), { nil: undefined }),
        fc.integer({ min: 1, max: 50_000 }),
        (rest, max, budget, n) => {
          const obj: Record<string, unknown> = { ...rest };
          delete obj.max_output_tokens;
          delete obj.thinking;
          if (max !== undefined) obj.max_output_tokens = max;
          if (budget !== undefined) obj.thinking = { type: "enabled", budget_tokens: budget };
          const call = parseCall(responses, Buffer.from(JSON.stringify(obj)));
          assert.ok(typeof call !== "string");
          clamp(call, n);
          const sent = body(upstreamBody(call));
          const want: Record<string, unknown> = { ...obj, max_output_tokens: n };
          if (budget !== undefined && budget >= n)
            want.thinking = n > 1024 ? { type: "enabled", budget_tokens: n - 1 } : { type: "disabled" };
          assert.deepEqual(sent, JSON.parse(JSON.stringify(want)));
        },
      ),
      { numRuns: 500 },
    );
  });

  it("takes the last of a repeated member, as JSON.parse and the provider do, and edits that one", () => {
    const raw = Buffer.from(
      '{"model":"cheap","max_tokens":10,"model":"dear","max_tokens":9000,"stream":true}',
    );
    const call = parseCall(messages, raw);
    assert.ok(typeof call !== "string");
    assert.equal(call.model, "dear");
    assert.equal(call.maxTokens, 9000);
    clamp(call, 100);
    assert.equal(body(upstreamBody(call)).max_tokens, 100);
  });

  it("decodes escaped member names and is not fooled by members nested in the conversation", () => {
    const raw = Buffer.from(
      '{"messages":[{"role":"user","content":"say \\"model\\":\\"x\\" \\\\","model":"nested"}],"mod\\u0065l":"real","stream":false}',
    );
    const call = parseCall(messages, raw);
    assert.ok(typeof call !== "string");
    assert.equal(call.model, "real");
    assert.equal(call.stream, false);
  });

  it("finds a cap whose name is written entirely in \\u escapes, so a clamp replaces it instead of being outvoted", () => {
    const name = [..."max_completion_tokens"]
      .map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`)
      .join("");
    const raw = Buffer.from(`{"model":"m","${name}":90000}`);
    const call = parseCall(chat, raw);
    assert.ok(typeof call !== "string");
    assert.equal(call.maxTokens, 90000);
    clamp(call, 100);
    assert.deepEqual(body(upstreamBody(call)), { model: "m", max_completion_tokens: 100 });
  });

  it("adds a member to an empty body without a stray comma", () => {
    const call = parseCall(responses, Buffer.from(" { } "));
    assert.ok(typeof call !== "string");
    clamp(call, 5);
    assert.deepEqual(body(upstreamBody(call)), { max_output_tokens: 5 });
  });

  for (const [text, why] of [
    ["", /empty/],
    ["[1]", /JSON object/],
    ['{"model":"m"', /not valid JSON/],
    ['{"model":"m",}', /not valid JSON/],
    ['{"model":"m"} trailing', /not valid JSON/],
    ['{"model":"unterminated}', /not valid JSON/],
    ['{"stream":tru e}', /not valid JSON/],
  ] as const) {
    it(`refuses ${JSON.stringify(text)} with a message`, () => {
      const out = parseCall(messages, Buffer.from(text));
      assert.equal(typeof out, "string");
      assert.match(out as string, why);
    });
  }
});
