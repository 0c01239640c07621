import { AttributionHeaders } from "../../protocol/headers.js";
import type { Endpoint, Provider } from "../../providers/types.js";
import { approxTokens, isRecord } from "../../providers/types.js";

/** A metered route: which wire family and endpoint a path is. */
export interface Route {
  provider: Provider;
  endpoint: Endpoint;
}

const ROUTES: Record<string, Route> = {
  "/v1/messages": { provider: "anthropic", endpoint: "messages" },
  "/v1/messages/count_tokens": { provider: "anthropic", endpoint: "count_tokens" },
  "/v1/chat/completions": { provider: "openai", endpoint: "chat_completions" },
  "/v1/responses": { provider: "openai", endpoint: "responses" },
};

export function routeOf(pathname: string): Route | undefined {
  return ROUTES[pathname.endsWith("/") ? pathname.slice(0, -1) : pathname];
}

/** Which request field caps output, per endpoint; OpenAI chat accepts either name. */
type MaxField = "max_tokens" | "max_completion_tokens" | "max_output_tokens";

/** A model call's request, parsed once, rewritten only where metering needs it. */
export interface CallRequest {
  route: Route;
  body: Record<string, unknown>;
  /** the model the harness asked for (an alias, possibly) */
  model: string;
  stream: boolean;
  maxField: MaxField | undefined;
  maxTokens: number | undefined;
  /** the shim added stream_options.include_usage, so the extra usage chunk is hidden from the client */
  hideUsage: boolean;
  clampedMaxTokens: number | null;
  /** the body was rewritten: send JSON.stringify(body) */
  modified: boolean;
  /** only stream_options.include_usage was added, and the request had no stream_options: splice it into the bytes */
  spliceUsage: boolean;
  raw: Buffer;
}

export function parseCall(route: Route, raw: Buffer): CallRequest | string {
  let body: unknown;
  try {
    body = JSON.parse(raw.toString("utf8"));
  } catch {
    return "request body is not valid JSON";
  }
  if (!isRecord(body)) return "request body must be a JSON object";
  const model = typeof body.model === "string" ? body.model : "";
  const stream = body.stream === true;
  let maxField: MaxField | undefined;
  for (const f of ["max_tokens", "max_completion_tokens", "max_output_tokens"] as const) {
    if (typeof body[f] === "number") {
      maxField = f;
      break;
    }
  }
  const call: CallRequest = {
    route,
    body,
    model,
    stream,
    maxField,
    maxTokens: maxField ? (body[maxField] as number) : undefined,
    hideUsage: false,
    clampedMaxTokens: null,
    modified: false,
    spliceUsage: false,
    raw,
  };
  // Chat streams report usage only when asked; ask, and remember to hide the answer from a client that did not.
  if (route.endpoint === "chat_completions" && stream) {
    const so = isRecord(body.stream_options) ? body.stream_options : undefined;
    if (so?.include_usage !== true) {
      const absent = !Object.hasOwn(body, "stream_options");
      body.stream_options = { ...(so ?? {}), include_usage: true };
      call.hideUsage = true;
      // No stream_options at all (the usual case): the field goes in front of the original bytes, sparing a
      // re-serialisation of what can be a few hundred KB of conversation on every call.
      if (absent) call.spliceUsage = true;
      else call.modified = true;
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
  call.body[field] = n;
  call.maxField = field;
  call.maxTokens = n;
  call.clampedMaxTokens = n;
  call.modified = true;
  // Anthropic extended thinking needs budget_tokens < max_tokens (and at least 1024).
  const thinking = call.body.thinking;
  if (isRecord(thinking) && typeof thinking.budget_tokens === "number" && thinking.budget_tokens >= n) {
    if (n > 1024) call.body.thinking = { ...thinking, budget_tokens: n - 1 };
    else delete call.body.thinking;
  }
}

const USAGE_FIELD = Buffer.from('"stream_options":{"include_usage":true},');

/** The bytes to send upstream: the original ones unless the request was rewritten. */
export function upstreamBody(call: CallRequest): Buffer {
  if (call.modified) return Buffer.from(JSON.stringify(call.body), "utf8");
  if (!call.spliceUsage) return call.raw;
  // The body parsed as an object holding "stream": true, so its first non-blank byte is "{" and a member follows.
  const raw = call.raw;
  let i = 0;
  while (i < raw.length && raw[i] !== 0x7b) i++;
  return Buffer.concat([raw.subarray(0, i + 1), USAGE_FIELD, raw.subarray(i + 1)]);
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
  attribution?: { cell: string; trace: string },
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
  if (attribution) {
    out[AttributionHeaders.cell] = attribution.cell;
    out[AttributionHeaders.trace] = attribution.trace;
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
