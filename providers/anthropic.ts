import { errorFromJson, errorFromText } from "./errors.js";
import type { SseEvent } from "./sse.js";
import { approxTokens, emptyTokenUsage, int, isRecord, type MeterResult, type TokenUsage } from "./types.js";

/**
 * Anthropic usage → normalised usage. `input_tokens` is only what follows the last cache breakpoint, so the total
 * input is input + cache_creation + cache_read; cache writes may be split by TTL in `cache_creation`.
 */
export function anthropicUsage(u: unknown): TokenUsage {
  const out = emptyTokenUsage();
  if (!isRecord(u)) return out;
  mergeAnthropicUsage(out, u);
  return out;
}

/** Overlay the fields present in `u` onto `into` (message_delta usage is cumulative: the last value wins). */
function mergeAnthropicUsage(into: TokenUsage, u: Record<string, unknown>): void {
  const uncached =
    "input_tokens" in u
      ? int(u.input_tokens)
      : into.inputTokens - into.cacheReadTokens - into.cacheWriteTokens;
  if ("cache_read_input_tokens" in u) into.cacheReadTokens = int(u.cache_read_input_tokens);
  const split = isRecord(u.cache_creation) ? u.cache_creation : undefined;
  if ("cache_creation_input_tokens" in u || split) {
    const w5 = int(split?.ephemeral_5m_input_tokens);
    const w1 = int(split?.ephemeral_1h_input_tokens);
    into.cacheWriteTokens = "cache_creation_input_tokens" in u ? int(u.cache_creation_input_tokens) : w5 + w1;
    into.cacheWrite1hTokens = Math.min(w1, into.cacheWriteTokens);
  }
  into.inputTokens = Math.max(0, uncached) + into.cacheReadTokens + into.cacheWriteTokens;
  if ("output_tokens" in u) into.outputTokens = int(u.output_tokens);
}

/** Meter a whole (non-streaming) Messages response body. */
export function anthropicJsonResult(bodyText: string): MeterResult {
  let body: unknown;
  try {
    body = JSON.parse(bodyText);
  } catch {
    return {
      usage: emptyTokenUsage(),
      model: undefined,
      complete: false,
      reported: false,
      error: undefined,
      sawContent: false,
    };
  }
  const error = errorFromJson(body);
  const rec = isRecord(body) ? body : {};
  return {
    usage: anthropicUsage(rec.usage),
    model: typeof rec.model === "string" ? rec.model : undefined,
    complete: error === undefined,
    reported: isRecord(rec.usage),
    error,
    sawContent: Array.isArray(rec.content) && rec.content.length > 0,
  };
}

/**
 * Meters a Messages SSE stream event by event. Only message_start, message_delta and error are parsed on the way;
 * content deltas are kept as text and parsed only if the stream is cut and output must be estimated.
 */
export class AnthropicStreamMeter {
  private readonly usage = emptyTokenUsage();
  private model: string | undefined;
  private started = false;
  private sawDelta = false;
  private complete = false;
  private error: MeterResult["error"];
  private sawContent = false;
  private readonly deltas: string[] = [];

  onEvent(ev: SseEvent): void {
    switch (ev.event) {
      case "content_block_delta":
        this.sawContent = true;
        this.deltas.push(ev.data);
        return;
      case "content_block_start":
        this.sawContent = true;
        return;
      case "message_start": {
        const msg = parse(ev.data)?.message;
        if (isRecord(msg)) {
          this.started = true;
          if (typeof msg.model === "string") this.model = msg.model;
          if (isRecord(msg.usage)) mergeAnthropicUsage(this.usage, msg.usage);
        }
        return;
      }
      case "message_delta": {
        const u = parse(ev.data)?.usage;
        if (isRecord(u)) {
          this.sawDelta = true;
          mergeAnthropicUsage(this.usage, u);
        }
        return;
      }
      case "message_stop":
        this.complete = true;
        return;
      case "error":
        this.error = errorFromText(ev.data) ?? { type: "error", message: ev.data };
        return;
    }
  }

  /** What was seen. A stream that ended without message_stop has its output estimated from the content seen. */
  result(): MeterResult {
    const usage = { ...this.usage };
    const reported = this.complete && this.sawDelta;
    if (!reported && this.started) {
      // message_start's output_tokens is a placeholder; what the deltas carried is the evidence.
      const seen = approxTokens(contentBytes(this.deltas));
      usage.outputTokens = this.sawDelta ? Math.max(usage.outputTokens, seen) : seen;
    }
    if (!this.started) Object.assign(usage, emptyTokenUsage());
    return {
      usage,
      model: this.model,
      complete: this.complete && !this.error,
      reported,
      error: this.error,
      sawContent: this.sawContent,
    };
  }
}

/** UTF-8 bytes of the model output carried by content_block_delta events (text, tool input JSON, thinking). */
function contentBytes(deltas: readonly string[]): number {
  let n = 0;
  for (const d of deltas) {
    const delta = parse(d)?.delta;
    if (!isRecord(delta)) continue;
    for (const k of ["text", "partial_json", "thinking"]) {
      const v = delta[k];
      if (typeof v === "string") n += Buffer.byteLength(v, "utf8");
    }
  }
  return n;
}

function parse(data: string): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(data);
    return isRecord(v) ? v : undefined;
  } catch {
    return undefined;
  }
}
