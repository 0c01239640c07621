import { randomBytes } from "node:crypto";
import { approxTokens, emptyTokenUsage, OUTPUT_CAP_FIELDS, type TokenUsage } from "../providers/types.js";
import type { Reply, ScriptedRequest } from "./types.js";

/** One content piece of a reply as it is streamed: text, or a tool call's input JSON. */
interface Piece {
  kind: "text" | "tool";
  id: string;
  name: string;
  /** the full text or JSON */
  full: string;
  /** the deltas the full text is streamed in */
  deltas: string[];
}

/** A reply made concrete for one request: model, pieces, and the usage a complete reply reports. */
export interface Plan {
  model: string;
  pieces: Piece[];
  /** uncached input as the provider reports it (Anthropic input_tokens; OpenAI prompt minus cached) */
  input: number;
  cacheRead: number;
  cacheWrite5m: number;
  cacheWrite1h: number;
  output: number;
  reasoning: number;
  /** input billed when the stream is cut: Anthropic knows it from message_start; OpenAI from the request bytes */
  cutInput: TokenUsage;
}

export function id(prefix: string): string {
  return `${prefix}${randomBytes(12).toString("hex")}`;
}

function split(s: string, n: number): string[] {
  const out: string[] = [];
  const chars = [...s];
  for (let i = 0; i < chars.length; i += n) out.push(chars.slice(i, i + n).join(""));
  return out;
}

export function plan(req: ScriptedRequest, reply: Reply): Plan {
  const n = Math.max(1, reply.deltaChars ?? 4);
  const pieces: Piece[] = [];
  if (reply.text !== undefined && reply.text !== "")
    pieces.push({ kind: "text", id: id("msg_"), name: "", full: reply.text, deltas: split(reply.text, n) });
  for (const tc of reply.toolCalls ?? []) {
    const full = JSON.stringify(tc.input);
    // Tool JSON streams in bigger slices, as providers do.
    pieces.push({ kind: "tool", id: id("call_"), name: tc.name, full, deltas: split(full, Math.max(n, 64)) });
  }
  const u = reply.usage ?? {};
  const contentBytes = pieces.reduce((a, p) => a + Buffer.byteLength(p.full, "utf8"), 0);
  // A provider never bills more output than the request's own cap (it stops at max_tokens).
  const capField = OUTPUT_CAP_FIELDS.map((f) => req.body[f]).find((v) => typeof v === "number" && v > 0);
  const output = Math.min(
    u.output ?? Math.max(1, approxTokens(contentBytes)),
    (capField as number | undefined) ?? Infinity,
  );
  const cacheRead = u.cacheRead ?? 0;
  const input = u.input ?? Math.max(1, approxTokens(req.bodyBytes) - cacheRead);
  const cacheWrite5m = req.provider === "anthropic" ? (u.cacheWrite5m ?? 0) : 0;
  const cacheWrite1h = req.provider === "anthropic" ? (u.cacheWrite1h ?? 0) : 0;
  const cutInput = emptyTokenUsage();
  if (req.provider === "anthropic") {
    cutInput.inputTokens = input + cacheRead + cacheWrite5m + cacheWrite1h;
    cutInput.cacheReadTokens = cacheRead;
    cutInput.cacheWriteTokens = cacheWrite5m + cacheWrite1h;
    cutInput.cacheWrite1hTokens = cacheWrite1h;
  } else {
    // OpenAI reports nothing before the end: a cut stream is billed at the estimate a client can make.
    cutInput.inputTokens = approxTokens(req.bodyBytes);
  }
  return {
    model: reply.model ?? (typeof req.body.model === "string" ? req.body.model : "unknown"),
    pieces,
    input,
    cacheRead,
    cacheWrite5m,
    cacheWrite1h,
    output,
    // Anthropic reports no reasoning figure (thinking is inside output_tokens).
    reasoning: req.provider === "openai" ? Math.min(u.reasoning ?? 0, output) : 0,
    cutInput,
  };
}

/** The normalised usage a complete reply is billed at. */
export function fullUsage(p: Plan): TokenUsage {
  return {
    inputTokens: p.input + p.cacheRead + p.cacheWrite5m + p.cacheWrite1h,
    outputTokens: p.output,
    cacheReadTokens: p.cacheRead,
    cacheWriteTokens: p.cacheWrite5m + p.cacheWrite1h,
    cacheWrite1hTokens: p.cacheWrite1h,
    reasoningTokens: p.reasoning,
  };
}

/** What a stream cut after `sentBytes` bytes of content deltas is billed at. */
export function cutUsage(p: Plan, sentBytes: number): TokenUsage {
  return { ...p.cutInput, outputTokens: approxTokens(sentBytes) };
}

export function sse(event: string | undefined, data: unknown): string {
  const body = typeof data === "string" ? data : JSON.stringify(data);
  return event ? `event: ${event}\ndata: ${body}\n\n` : `data: ${body}\n\n`;
}

/** A streamed event list with markers of where content deltas are (for cut / error-after-N). */
export interface StreamScript {
  head: string[];
  /** each content delta event, with the content bytes it carries */
  deltas: Array<{ text: string; bytes: number }>;
  tail: string[];
  /** an error event in this provider's stream shape */
  errorEvent(type: string, message: string): string;
}
