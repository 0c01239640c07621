import { AttributionHeaders } from "../protocol/headers.js";
import { type JsonMembers, readMembers, withMembers } from "../providers/json-members.js";
import type { Route } from "../providers/routes.js";
import type { Provider } from "../providers/types.js";
import { approxTokens, isRecord, OUTPUT_CAP_FIELDS, type OutputCapField } from "../providers/types.js";

/** Which request field caps output, per endpoint; OpenAI chat accepts either name. */
type MaxField = OutputCapField;

/** A model call's request. Only the few top-level members metering needs are parsed; the conversation is not. */
export interface CallRequest {
  route: Route;
  /** the model the harness asked for (an alias, possibly) */
  model: string;
  stream: boolean;
  maxField: MaxField | undefined;
  maxTokens: number | undefined;
  /** the shim added stream_options.include_usage, so the extra usage chunk is hidden from the client */
  hideUsage: boolean;
  clampedMaxTokens: number | null;
  raw: Buffer;
  body: JsonMembers;
  /** members metering sets in the bytes sent upstream; none: the client's bytes go out untouched */
  set: Map<string, unknown>;
}

/** The top-level members metering reads: model, streaming, the output cap and what a clamp must keep valid. */
const READ = new Set<string>(["model", "stream", "stream_options", "thinking", ...OUTPUT_CAP_FIELDS]);

export function parseCall(route: Route, raw: Buffer): CallRequest | string {
  const body = readMembers(raw, READ);
  if (typeof body === "string") return body;
  const value = (name: string) => body.members.get(name)?.value;
  const model = value("model");
  const maxField = OUTPUT_CAP_FIELDS.find((f) => typeof value(f) === "number");
  const stream = value("stream") === true;
  const call: CallRequest = {
    route,
    model: typeof model === "string" ? model : "",
    stream,
    maxField,
    maxTokens: maxField ? (value(maxField) as number) : undefined,
    hideUsage: false,
    clampedMaxTokens: null,
    raw,
    body,
    set: new Map(),
  };
  // Chat streams report usage only when asked; ask, and remember to hide the answer from a client that did not.
  if (route.endpoint === "chat_completions" && stream) {
    const so = value("stream_options");
    const opts = isRecord(so) ? so : undefined;
    if (opts?.include_usage !== true) {
      call.hideUsage = true;
      call.set.set("stream_options", { ...(opts ?? {}), include_usage: true });
    }
  }
  return call;
}

/** The output field a clamp writes when the request set none. */
function defaultMaxField(call: CallRequest): MaxField {
  if (call.route.endpoint === "responses") return "max_output_tokens";
  if (call.route.endpoint === "chat_completions") return "max_completion_tokens";
  return "max_tokens";
}

/** Lower the request's output cap to `n` tokens (adding the field when absent), keeping the request valid. */
export function clamp(call: CallRequest, n: number): void {
  const field = call.maxField ?? defaultMaxField(call);
  call.set.set(field, n);
  call.maxField = field;
  call.maxTokens = n;
  call.clampedMaxTokens = n;
  // Anthropic extended thinking needs budget_tokens < max_tokens (and at least 1024).
  const thinking = call.body.members.get("thinking")?.value;
  if (isRecord(thinking) && typeof thinking.budget_tokens === "number" && thinking.budget_tokens >= n) {
    call.set.set("thinking", n > 1024 ? { ...thinking, budget_tokens: n - 1 } : { type: "disabled" });
  }
}

/** The bytes to send upstream: the client's own unless metering set a member. */
export function upstreamBody(call: CallRequest): Buffer {
  return withMembers(call.body, call.set);
}

/** Input-token estimate from the bytes sent (the scripted provider bills a cut OpenAI stream the same way). */
export function estimateInputTokens(bytes: number): number {
  return approxTokens(bytes);
}

const HOP_BY_HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-authorization",
  "proxy-authenticate",
  "proxy-connection",
  "te",
  "trailer",
  "transfer-encoding",
  "upgrade",
  "host",
  "content-length",
]);

/**
 * Headers for the upstream request: the client's (anthropic-version, anthropic-beta, ...) minus hop-by-hop ones and
 * the harness's dummy key, plus the run's key in the provider's header. Compression is refused so usage can be read.
 */
export function upstreamHeaders(
  incoming: Record<string, string | string[] | undefined>,
  provider: Provider | undefined,
  key: string,
  attribution?: { cell: string; trace: string; attempt: number },
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  let sawBearer = false;
  let sawXKey = false;
  for (const name in incoming) {
    const v = incoming[name];
    if (v === undefined || HOP_BY_HOP.has(name)) continue;
    if (name === "x-api-key") {
      sawXKey = true;
      continue;
    }
    if (name === "authorization") {
      sawBearer = true;
      continue;
    }
    if (name === "accept-encoding") continue;
    out[name] = v;
  }
  out["accept-encoding"] = "identity";
  // A harness cannot attribute its calls to another cell: the shim's own values replace whatever it sent.
  delete out[AttributionHeaders.cell];
  delete out[AttributionHeaders.trace];
  delete out[AttributionHeaders.call];
  delete out[AttributionHeaders.attempt];
  if (attribution) {
    out[AttributionHeaders.cell] = attribution.cell;
    out[AttributionHeaders.trace] = attribution.trace;
    out[AttributionHeaders.attempt] = String(attribution.attempt);
  }
  const useXKey = provider === "anthropic" || (provider === undefined && sawXKey && !sawBearer);
  if (useXKey) out["x-api-key"] = key;
  else out.authorization = `Bearer ${key}`;
  return out;
}

/** Response headers for the client: the upstream's, minus hop-by-hop ones and any length we may change. */
export function clientHeaders(
  upstream: Record<string, string | string[] | undefined>,
): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const name in upstream) {
    const v = upstream[name];
    if (v === undefined || HOP_BY_HOP.has(name) || name === "content-encoding") continue;
    out[name] = v;
  }
  return out;
}
