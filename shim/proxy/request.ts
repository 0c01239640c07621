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

/** A change to the request's bytes: [start, end) replaced by `bytes` (start === end inserts). */
interface Edit {
  start: number;
  end: number;
  bytes: Buffer;
}

/** A top-level member of the request body: its parsed value and where the value's bytes are. */
interface Member {
  value: unknown;
  start: number;
  end: number;
}

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
  /** the members read, last occurrence of each (what JSON.parse and the provider see) */
  members: Map<string, Member>;
  /** just past the body's opening brace: where a new member goes */
  open: number;
  /** how many top-level members the body has */
  memberCount: number;
  /** members whose value metering replaced, by name; with `added`, none: the client's bytes go out untouched */
  edits: Map<string, Edit>;
  /** members metering added, by name, as JSON */
  added: Map<string, Buffer>;
}

const MAX_FIELDS = ["max_tokens", "max_completion_tokens", "max_output_tokens"] as const;
/** The top-level members metering reads: model, streaming, the output cap and what a clamp must keep valid. */
const READ = new Set<string>(["model", "stream", "stream_options", "thinking", ...MAX_FIELDS]);

// JSON's structural bytes
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;

function isSpace(c: number | undefined): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

function skipSpace(b: Buffer, i: number): number {
  while (isSpace(b[i])) i++;
  return i;
}

/** From an opening quote to just past its closing quote, or -1. Strings are most of a request: memchr, not a loop. */
function skipString(b: Buffer, i: number): number {
  for (let q = i; ; ) {
    q = b.indexOf(QUOTE, q + 1);
    if (q < 0) return -1;
    let k = q - 1;
    while (b[k] === BACKSLASH) k--;
    if ((q - 1 - k) % 2 === 0) return q + 1;
  }
}

/** From the first byte of a value to just past it, or -1 when the structure is broken. */
function skipValue(b: Buffer, i: number): number {
  const c = b[i];
  if (c === QUOTE) return skipString(b, i);
  if (c === OPEN_BRACE || c === OPEN_BRACKET) {
    let depth = 0;
    while (i < b.length) {
      const d = b[i]!;
      if (d === QUOTE) {
        i = skipString(b, i);
        if (i < 0) return -1;
        continue;
      }
      if (d === OPEN_BRACE || d === OPEN_BRACKET) depth++;
      else if (d === CLOSE_BRACE || d === CLOSE_BRACKET) {
        depth--;
        if (depth === 0) return i + 1;
      }
      i++;
    }
    return -1;
  }
  // number, true, false, null: up to the next delimiter
  const from = i;
  while (i < b.length && !isSpace(b[i]) && b[i] !== COMMA && b[i] !== CLOSE_BRACE && b[i] !== CLOSE_BRACKET)
    i++;
  return i > from ? i : -1;
}

/**
 * The top-level members in READ, without parsing the rest: a coding agent's request is tens to hundreds of KB of
 * conversation, and decoding it to a string and parsing it cost the shim about a millisecond per call. Strings are
 * skipped with indexOf. Returns the opening brace's end and the members, or a message when the body is not a JSON
 * object. Bytes inside skipped values are not validated: the provider rejects those, unbilled.
 */
function scanMembers(b: Buffer): { open: number; count: number; members: Map<string, Member> } | string {
  const broken = "request body is not valid JSON";
  const members = new Map<string, Member>();
  let i = skipSpace(b, 0);
  if (i >= b.length) return "request body is empty";
  if (b[i] !== OPEN_BRACE) return "request body must be a JSON object";
  const open = i + 1;
  i = skipSpace(b, open);
  if (b[i] === CLOSE_BRACE) return skipSpace(b, i + 1) === b.length ? { open, count: 0, members } : broken;
  for (let count = 1; ; count++) {
    if (b[i] !== QUOTE) return broken;
    const keyStart = i;
    const keyEnd = skipString(b, keyStart);
    if (keyEnd < 0) return broken;
    i = skipSpace(b, keyEnd);
    if (b[i] !== COLON) return broken;
    const start = skipSpace(b, i + 1);
    const end = skipValue(b, start);
    if (end < 0) return broken;
    // Keys are short; only one that could be a member we read is decoded (escapes and all).
    if (keyEnd - keyStart <= 64) {
      const key = parseSlice(b, keyStart, keyEnd);
      if (typeof key === "string" && READ.has(key)) {
        const value = parseSlice(b, start, end);
        if (value === BROKEN) return broken;
        members.set(key, { value, start, end });
      } else if (key === BROKEN) return broken;
    }
    i = skipSpace(b, end);
    if (b[i] === COMMA) {
      i = skipSpace(b, i + 1);
      continue;
    }
    if (b[i] === CLOSE_BRACE && skipSpace(b, i + 1) === b.length) return { open, count, members };
    return broken;
  }
}

const BROKEN = Symbol("broken");

function parseSlice(b: Buffer, start: number, end: number): unknown {
  try {
    return JSON.parse(b.toString("utf8", start, end));
  } catch {
    return BROKEN;
  }
}

export function parseCall(route: Route, raw: Buffer): CallRequest | string {
  const scanned = scanMembers(raw);
  if (typeof scanned === "string") return scanned;
  const { members, open, count } = scanned;
  const model = members.get("model")?.value;
  let maxField: MaxField | undefined;
  for (const f of MAX_FIELDS) {
    if (typeof members.get(f)?.value === "number") {
      maxField = f;
      break;
    }
  }
  const stream = members.get("stream")?.value === true;
  const call: CallRequest = {
    route,
    model: typeof model === "string" ? model : "",
    stream,
    maxField,
    maxTokens: maxField ? (members.get(maxField)!.value as number) : undefined,
    hideUsage: false,
    clampedMaxTokens: null,
    raw,
    members,
    open,
    memberCount: count,
    edits: new Map(),
    added: new Map(),
  };
  // Chat streams report usage only when asked; ask, and remember to hide the answer from a client that did not.
  if (route.endpoint === "chat_completions" && stream) {
    const so = members.get("stream_options");
    const opts = isRecord(so?.value) ? so.value : undefined;
    if (opts?.include_usage !== true) {
      call.hideUsage = true;
      setMember(call, "stream_options", { ...(opts ?? {}), include_usage: true });
    }
  }
  return call;
}

/** Set a top-level member in the bytes sent upstream: the value of its last occurrence is replaced, or it is added. */
function setMember(call: CallRequest, name: string, value: unknown): void {
  const json = Buffer.from(JSON.stringify(value));
  const at = call.members.get(name);
  if (at) call.edits.set(name, { start: at.start, end: at.end, bytes: json });
  else call.added.set(name, json);
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
  setMember(call, field, n);
  call.maxField = field;
  call.maxTokens = n;
  call.clampedMaxTokens = n;
  // Anthropic extended thinking needs budget_tokens < max_tokens (and at least 1024).
  const thinking = call.members.get("thinking")?.value;
  if (isRecord(thinking) && typeof thinking.budget_tokens === "number" && thinking.budget_tokens >= n) {
    setMember(call, "thinking", n > 1024 ? { ...thinking, budget_tokens: n - 1 } : { type: "disabled" });
  }
}

/** The bytes to send upstream: the client's own unless metering changed a member. */
export function upstreamBody(call: CallRequest): Buffer {
  if (call.edits.size === 0 && call.added.size === 0) return call.raw;
  const edits = [...call.edits.values()];
  if (call.added.size > 0) {
    // New members go first, right after the opening brace.
    const members = [...call.added].map(([name, json]) => `${JSON.stringify(name)}:${json.toString("utf8")}`);
    const text = members.join(",") + (call.memberCount > 0 ? "," : "");
    edits.push({ start: call.open, end: call.open, bytes: Buffer.from(text) });
  }
  edits.sort((a, b) => a.start - b.start);
  const parts: Buffer[] = [];
  let at = 0;
  for (const e of edits) {
    parts.push(call.raw.subarray(at, e.start), e.bytes);
    at = e.end;
  }
  parts.push(call.raw.subarray(at));
  return Buffer.concat(parts);
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
