/** The wire families evalfleet speaks. Both sides of the shim and the gateway use these. */
export type Provider = "anthropic" | "openai";

/** The metered endpoints. Anything else is passed through unmetered. */
export type Endpoint = "messages" | "count_tokens" | "chat_completions" | "responses";

/** The request fields that cap a call's output, by wire: Anthropic, OpenAI chat (either name), Responses. */
export const OUTPUT_CAP_FIELDS = ["max_tokens", "max_completion_tokens", "max_output_tokens"] as const;
export type OutputCapField = (typeof OUTPUT_CAP_FIELDS)[number];

/**
 * Token counts of one call, normalised across providers. `inputTokens` is the total input (cache reads and cache
 * writes included, like OpenAI's prompt_tokens), `outputTokens` includes reasoning. The other figures are subsets.
 */
export interface TokenUsage {
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  /** all cache writes (5-minute and 1-hour) */
  cacheWriteTokens: number;
  /** the part of cacheWriteTokens written with the 1-hour TTL (priced higher) */
  cacheWrite1hTokens: number;
  reasoningTokens: number;
}

export function emptyTokenUsage(): TokenUsage {
  return {
    inputTokens: 0,
    outputTokens: 0,
    cacheReadTokens: 0,
    cacheWriteTokens: 0,
    cacheWrite1hTokens: 0,
    reasoningTokens: 0,
  };
}

/** A provider error as read off a response or a stream. */
export interface ProviderErrorInfo {
  type: string;
  message: string;
  code?: string;
}

/** What a response (JSON or stream) said about itself. */
export interface MeterResult {
  usage: TokenUsage;
  /** the model the provider says served the call */
  model: string | undefined;
  /** the response finished normally (message_stop / [DONE] / response.completed, or a whole JSON body) */
  complete: boolean;
  /** usage was reported by the provider; false means the figures are an estimate from what was seen */
  reported: boolean;
  /** an error the provider sent (in the body or as an SSE event) */
  error: ProviderErrorInfo | undefined;
  /** whether any model output (content) was seen: an error before it can be retried safely */
  sawContent: boolean;
}

/** Non-negative integer from an unknown JSON field (providers send null, absent or numbers). */
export function int(v: unknown): number {
  return typeof v === "number" && Number.isFinite(v) && v > 0 ? Math.floor(v) : 0;
}

export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * The tokenizer-free estimate both the shim (for a cut stream that never reported usage) and the scripted provider
 * (for what it bills such a stream) use: one token per 4 UTF-8 bytes, rounded up. Over-estimates JSON syntax, which is
 * the safe direction for money.
 */
export function approxTokens(bytes: number): number {
  return Math.ceil(bytes / 4);
}
