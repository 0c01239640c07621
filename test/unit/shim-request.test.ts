import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { clamp, parseCall, routeOf, upstreamBody } from "../../shim/proxy/request.js";

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
