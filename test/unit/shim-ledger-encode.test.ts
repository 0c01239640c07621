import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { decodeJson } from "../../protocol/decode.js";
import { ValidationError } from "../../protocol/errors.js";
import { type LedgerCall, LedgerCallSchema, MessageTypes } from "../../protocol/messages.js";
import { encodeLedgerRow } from "../../shim/sink.js";

const row: LedgerCall = {
  type: MessageTypes.ledgerCall,
  callId: "0b8c7a3e-7c1f-4f55-8f57-2f1d1f0a0b01",
  run: "r1",
  cellId: "c1",
  attempt: 1,
  traceId: "t",
  model: "claude-sonnet-4-5",
  alias: "sonnet",
  pool: "anthropic__claude-sonnet-4-5",
  provider: "anthropic",
  endpoint: "messages",
  status: "ok",
  httpStatus: 200,
  inputTokens: 1200,
  outputTokens: 300,
  cacheReadTokens: 1000,
  cacheWriteTokens: 0,
  reasoningTokens: 0,
  costNanoUsd: 5_400_000,
  priceVersion: "2025-10",
  latencyMs: 812,
  ttfbMs: 95,
  pacerWaitMs: 0,
  retries: 0,
  clampedMaxTokens: null,
  estimated: false,
  costMode: "platform",
  startedAt: "2026-12-01T10:00:00.000Z",
};

describe("ledger row encoding (the shim's hot path)", () => {
  it("puts on the wire exactly what the schema decodes back", () => {
    assert.deepEqual(decodeJson(LedgerCallSchema, encodeLedgerRow(row), "ledger call"), row);
  });

  for (const [field, bad] of [
    ["costNanoUsd", Number.NaN],
    ["outputTokens", 1.5],
    ["inputTokens", -3],
    ["ttfbMs", Number.POSITIVE_INFINITY],
    ["callId", ""],
  ] as const) {
    it(`refuses ${field} = ${String(bad)} with the schema's error naming the field`, () => {
      const broken = { ...row, [field]: bad } as LedgerCall;
      assert.throws(
        () => encodeLedgerRow(broken),
        (err: unknown) => err instanceof ValidationError && err.issues.some((i) => i.path === field),
      );
    });
  }
});
