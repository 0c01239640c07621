import { type LedgerCall, MessageTypes } from "../../protocol/messages.js";

/**
 * A metered call as the shim reports it: attempt 0, model `m` in pool `h__m`, 100 tokens in and 10 out, priced at
 * nothing; the given fields override.
 */
export function ledgerCall(
  call: Pick<LedgerCall, "callId" | "run" | "cellId"> & Partial<LedgerCall>,
): LedgerCall {
  return {
    type: MessageTypes.ledgerCall,
    attempt: 0,
    traceId: call.cellId,
    model: "m",
    alias: "h__m",
    pool: "h__m",
    provider: "anthropic",
    endpoint: "/v1/messages",
    status: "ok",
    httpStatus: 200,
    inputTokens: 100,
    outputTokens: 10,
    cacheReadTokens: 5,
    cacheWriteTokens: 1,
    reasoningTokens: 2,
    costNanoUsd: 0,
    priceVersion: "test",
    latencyMs: 10,
    ttfbMs: 5,
    pacerWaitMs: 0,
    retries: 0,
    clampedMaxTokens: null,
    estimated: false,
    costMode: "platform",
    startedAt: "2026-12-01T00:00:30.000Z",
    ...call,
  };
}
