import { errorFromJson } from "./errors.js";
import type { SseEvent } from "./sse.js";
import { approxTokens, emptyTokenUsage, int, isRecord, type MeterResult, type TokenUsage } from "./types.js";

/**
 * OpenAI usage as both its APIs nest it: `<in>_tokens` holds the cached tokens (`<in>_tokens_details.cached_tokens`),
 * `<out>_tokens` the reasoning ones (`<out>_tokens_details.reasoning_tokens`).
 */
function nestedUsage(u: unknown, input: string, output: string): TokenUsage {
  const out = emptyTokenUsage();
  if (!isRecord(u)) return out;
  const inDetails = u[`${input}_tokens_details`];
  const outDetails = u[`${output}_tokens_details`];
  out.inputTokens = int(u[`${input}_tokens`]);
  out.cacheReadTokens = Math.min(int(isRecord(inDetails) ? inDetails.cached_tokens : 0), out.inputTokens);
  out.outputTokens = int(u[`${output}_tokens`]);
  out.reasoningTokens = Math.min(
    int(isRecord(outDetails) ? outDetails.reasoning_tokens : 0),
    out.outputTokens,
  );
  return out;
}

/** Chat Completions usage: cached tokens are inside prompt_tokens, reasoning inside completion_tokens. */
export function chatUsage(u: unknown): TokenUsage {
  return nestedUsage(u, "prompt", "completion");
}

/** Responses API usage: the same nesting under input_/output_ names. */
export function responsesUsage(u: unknown): TokenUsage {
  return nestedUsage(u, "input", "output");
}

function failed(): MeterResult {
  return {
    usage: emptyTokenUsage(),
    model: undefined,
    complete: false,
    reported: false,
    error: undefined,
    sawContent: false,
  };
}

/** Meter a whole Chat Completions or Responses body. */
export function openaiJsonResult(bodyText: string, kind: "chat" | "responses"): MeterResult {
  let body: unknown;
  try {
    body = JSON.parse(bodyText);
  } catch {
    return failed();
  }
  if (!isRecord(body)) return failed();
  const error =
    errorFromJson(body) ?? (isRecord(body.error) ? errorFromJson({ error: body.error }) : undefined);
  const usage = kind === "chat" ? chatUsage(body.usage) : responsesUsage(body.usage);
  const content = kind === "chat" ? body.choices : body.output;
  return {
    usage,
    model: typeof body.model === "string" ? body.model : undefined,
    complete: error === undefined,
    reported: isRecord(body.usage),
    error,
    sawContent: Array.isArray(content) && content.length > 0,
  };
}

/** Where `"usage":` is followed by an object (not null) in a chunk's JSON text; cheap pre-check before parsing. */
function hasUsageObject(data: string): boolean {
  const i = data.indexOf('"usage"');
  if (i < 0) return false;
  let j = i + 7;
  while (j < data.length && (data[j] === " " || data[j] === ":")) j++;
  return data[j] === "{";
}

/**
 * What an OpenAI stream meter ends with: the usage the provider reported or, when none came, the output estimated
 * from the content bytes seen; an error event makes the response incomplete.
 */
function streamResult(
  seen: Pick<MeterResult, "model" | "error" | "sawContent"> & {
    usage: TokenUsage | undefined;
    complete: boolean;
  },
  outputBytes: () => number,
): MeterResult {
  const reported = seen.usage !== undefined;
  const usage = seen.usage ?? emptyTokenUsage();
  if (!reported) usage.outputTokens = approxTokens(outputBytes());
  const { model, error, sawContent } = seen;
  return { usage, model, complete: seen.complete && !error, reported, error, sawContent };
}

/**
 * Meters a Chat Completions stream. When the shim added `stream_options.include_usage` itself, the extra usage-only
 * chunk is reported as hidden so the client sees exactly the stream it asked for.
 */
export class ChatStreamMeter {
  private usage: TokenUsage | undefined;
  private model: string | undefined;
  private complete = false;
  private error: MeterResult["error"];
  private readonly chunks: string[] = [];

  constructor(private readonly hideUsageChunk: boolean) {}

  /** Returns false when the event must not be forwarded to the client. */
  onEvent(ev: SseEvent): boolean {
    const data = ev.data;
    if (data === "[DONE]") {
      this.complete = true;
      return true;
    }
    if (this.model === undefined || hasUsageObject(data) || data.startsWith('{"error"')) {
      const obj = parse(data);
      if (!obj) return true;
      if (typeof obj.model === "string") this.model = obj.model;
      if (isRecord(obj.error)) this.error = errorFromJson(obj);
      if (isRecord(obj.usage)) {
        this.usage = chatUsage(obj.usage);
        const choices = obj.choices;
        if (this.hideUsageChunk && Array.isArray(choices) && choices.length === 0) return false;
      }
      this.chunks.push(data);
      return true;
    }
    this.chunks.push(data);
    return true;
  }

  result(): MeterResult {
    const seen = { usage: this.usage, model: this.model, complete: this.complete, error: this.error };
    return streamResult({ ...seen, sawContent: this.chunks.length > 0 }, () => chatContentBytes(this.chunks));
  }
}

function chatContentBytes(chunks: readonly string[]): number {
  let n = 0;
  for (const c of chunks) {
    const choices = parse(c)?.choices;
    if (!Array.isArray(choices)) continue;
    for (const ch of choices) {
      const d = isRecord(ch) && isRecord(ch.delta) ? ch.delta : undefined;
      if (!d) continue;
      if (typeof d.content === "string") n += Buffer.byteLength(d.content, "utf8");
      if (typeof d.reasoning_content === "string") n += Buffer.byteLength(d.reasoning_content, "utf8");
      if (Array.isArray(d.tool_calls)) {
        for (const tc of d.tool_calls) {
          const args = isRecord(tc) && isRecord(tc.function) ? tc.function.arguments : undefined;
          if (typeof args === "string") n += Buffer.byteLength(args, "utf8");
        }
      }
    }
  }
  return n;
}

const RESPONSES_DONE = new Set(["response.completed", "response.incomplete", "response.failed"]);

/** Meters a Responses API stream: usage arrives on response.completed (or .incomplete / .failed). */
export class ResponsesStreamMeter {
  private usage: TokenUsage | undefined;
  private model: string | undefined;
  private complete = false;
  private error: MeterResult["error"];
  private sawContent = false;
  private readonly deltas: string[] = [];

  onEvent(ev: SseEvent): void {
    // Compatible servers may omit the `event:` line; the type is then only inside the data.
    let type = ev.event;
    let obj: Record<string, unknown> | undefined;
    if (type === "" || type === "message") {
      obj = parse(ev.data);
      type = typeof obj?.type === "string" ? obj.type : "";
    }
    if (type.endsWith(".delta")) {
      this.sawContent = true;
      this.deltas.push(ev.data);
      return;
    }
    if (type === "response.output_item.added") this.sawContent = true;
    if (type === "response.created" || RESPONSES_DONE.has(type) || type === "error") {
      obj ??= parse(ev.data);
      if (!obj) return;
      if (type === "error") {
        this.error = errorFromJson({ error: obj.error ?? obj }) ?? { type: "error", message: ev.data };
        return;
      }
      const resp = isRecord(obj.response) ? obj.response : undefined;
      if (typeof resp?.model === "string") this.model = resp.model;
      if (!RESPONSES_DONE.has(type)) return;
      if (isRecord(resp?.usage)) this.usage = responsesUsage(resp.usage);
      if (type === "response.failed") {
        this.error = errorFromJson({ error: resp?.error }) ?? {
          type: "response.failed",
          message: "response failed",
        };
      }
      this.complete = true;
    }
  }

  result(): MeterResult {
    const seen = { usage: this.usage, model: this.model, complete: this.complete, error: this.error };
    return streamResult({ ...seen, sawContent: this.sawContent }, () => responsesDeltaBytes(this.deltas));
  }
}

function responsesDeltaBytes(deltas: readonly string[]): number {
  let n = 0;
  for (const d of deltas) {
    const v = parse(d)?.delta;
    if (typeof v === "string") n += Buffer.byteLength(v, "utf8");
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
