import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { MAX_STREAM_BYTES, redactSecrets, sanitizeOutput, truncateTail } from "../../protocol/redact.js";

describe("redaction", () => {
  const secrets = [
    "sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345",
    "sk-proj-ABCDEFGHIJKLMNOPQRSTUV",
    "efk-0123456789abcdef0123",
  ];
  it("removes sk- keys, bearer tokens, key headers and secret env assignments", () => {
    const text = [
      `using key ${secrets[0]} now`,
      `Authorization: Bearer abcdefghijklmnopqrstuvwxyz`,
      `x-api-key: ${secrets[1]}`,
      `ANTHROPIC_API_KEY=supersecretvalue123`,
      `export OPENAI_API_KEY="another-secret-value"`,
      `CLAUDE_CODE_OAUTH_TOKEN: oauthtokenvalue999`,
      `run key ${secrets[2]}`,
    ].join("\n");
    const out = redactSecrets(text);
    for (const s of [
      ...secrets,
      "abcdefghijklmnopqrstuvwxyz",
      "supersecretvalue123",
      "another-secret-value",
      "oauthtokenvalue999",
    ])
      assert.ok(!out.includes(s), `${s} leaked:\n${out}`);
    assert.match(out, /ANTHROPIC_API_KEY=\[REDACTED\]/);
  });
  it("redacts caller-supplied secrets verbatim", () => {
    assert.equal(redactSecrets("token=hunter2hunter2!", ["hunter2hunter2"]), "token=[REDACTED]!");
  });
  it("keeps the last 50 KB with a truncation notice, on a character boundary", () => {
    const text = "é".repeat(40_000);
    const out = truncateTail(text);
    assert.match(out, /^\[truncated: \d+ of 80000 bytes omitted/);
    const body = out.slice(out.indexOf("\n") + 1);
    assert.ok(Buffer.byteLength(body) <= MAX_STREAM_BYTES);
    assert.ok(!body.includes("\uFFFD"));
    assert.equal(truncateTail("short"), "short");
  });
  it("sanitizeOutput redacts before cutting, so a key straddling the cut cannot survive", () => {
    const key = "sk-abcdefghijklmnopqrstuvwxyz0123456789";
    const text = `${"x".repeat(MAX_STREAM_BYTES - 10)} ${key}`;
    assert.ok(!sanitizeOutput(text).includes("sk-abcdefgh"));
  });
});
