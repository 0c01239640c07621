import type { Usage } from "../protocol/messages.js";
import type { Endpoint, Provider } from "../providers/types.js";

/** Token figures a reply reports. Absent figures are derived: input from the request bytes, output from the reply. */
export interface ScriptedUsage {
  /** uncached input (Anthropic's input_tokens); for OpenAI the part of prompt_tokens that is not cached */
  input?: number;
  output?: number;
  cacheRead?: number;
  /** cache writes with the 5-minute TTL (Anthropic only) */
  cacheWrite5m?: number;
  /** cache writes with the 1-hour TTL (Anthropic only) */
  cacheWrite1h?: number;
  /** reasoning tokens, inside output */
  reasoning?: number;
}

/** A tool call the reply makes: Anthropic tool_use, OpenAI function call (arguments = JSON of input). */
export interface ScriptedToolCall {
  name: string;
  input: Record<string, unknown>;
}

export interface ScriptedError {
  status: number;
  /** provider error type; defaults follow the status (429 rate_limit_error, 529 overloaded_error, ...) */
  type?: string;
  message?: string;
  retryAfterS?: number;
  /** a spend-limit 429 (`enforced_spend_limit_reached`): terminal, no retry-after */
  spendLimit?: boolean;
}

/** One scripted reply. Without error / cut fields it is a normal, billed reply. */
export interface Reply {
  text?: string;
  toolCalls?: ScriptedToolCall[];
  usage?: ScriptedUsage;
  /** the model the reply says served it (default: the requested model) */
  model?: string;
  /** an HTTP error instead of a reply: never billed */
  error?: ScriptedError;
  /** HTTP 200, then an `overloaded_error` event before anything else (Anthropic streams): never billed */
  overloadedInStream?: boolean;
  /** stream: send an error event after this many content deltas (billed as what was sent) */
  errorAfterDeltas?: number;
  /** stream: drop the connection after this many content deltas (billed as what was sent) */
  cutAfterDeltas?: number;
  firstByteDelayMs?: number;
  deltaDelayMs?: number;
  /** characters per content delta (default 4: one estimated token each) */
  deltaChars?: number;
}

/** What the scenario function is told about each request. */
export interface ScriptedRequest {
  provider: Provider;
  endpoint: Endpoint;
  path: string;
  /** the API key the request carried (x-api-key or bearer) */
  key: string;
  body: Record<string, unknown>;
  bodyBytes: number;
  headers: Record<string, string | string[] | undefined>;
  /** 0-based index of this request among all the server saw */
  index: number;
}

/** A fixed reply, replies played in order (the last one repeats), or a function of the request. */
export type Scenario = Reply | Reply[] | ((req: ScriptedRequest) => Reply);

/** Per-key rate limits, per minute, as token buckets replenished continuously. */
export interface RateLimits {
  rpm?: number;
  inputTpm?: number;
  outputTpm?: number;
}

/** Tokens and money served, in the shape of an attempt's usage. `inputTokens` is total input (cache reads and writes included). */
export type BillLine = Usage;

export interface Bill {
  priceVersion: string;
  total: BillLine;
  byKey: Record<string, BillLine>;
}
