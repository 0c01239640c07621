import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { emptyUsage } from "../protocol/messages.js";
import { anthropicErrorBody, openaiErrorBody } from "../providers/errors.js";
import { routeOf } from "../providers/routes.js";
import { approxTokens, type Endpoint, type Provider, type TokenUsage } from "../providers/types.js";
import { anthropicJson, anthropicStream } from "./anthropic.js";
import { RateLimiter } from "./limits.js";
import { chatJson, chatStream, responsesJson, responsesStream } from "./openai.js";
import { billNanoUsd, type PriceSheet, publishedSheet, type SheetEntry, sheetEntry } from "./prices.js";
import type { Bill, BillLine, RateLimits, Reply, Scenario, ScriptedRequest } from "./types.js";
import { usageReport } from "./usage-report.js";
import { cutUsage, fullUsage, type Plan, plan, type StreamScript } from "./wire.js";

export { claudeWriteScenario, codexShellScenario } from "./scenarios.js";
export type * from "./types.js";

export interface ScriptedProviderOptions {
  port?: number;
  host?: string;
  scenario?: Scenario;
  limits?: RateLimits;
  /** when set, only these API keys are accepted (401 otherwise) */
  keys?: string[];
  /**
   * Prices for models the published sheet does not list (test models), in the sheet's own form. A model neither
   * lists is answered 404 `not_found_error`, as a real provider answers a model it does not serve.
   */
  extraPrices?: Record<string, SheetEntry>;
  /** admin keys its usage reports answer to (usage-report.ts); none: every report request is refused (401) */
  adminKeys?: string[];
}

/** One request as the provider saw it (the key is reported so tests can check the shim swapped it). */
export interface ServedCall {
  index: number;
  provider: Provider;
  endpoint: Endpoint | "other";
  path: string;
  key: string;
  /** when it arrived (its usage-report bucket) */
  atMs: number;
  model: string;
  stream: boolean;
  status: number;
  outcome: "ok" | "error" | "cut" | "rate_limited" | "refused";
  billed: TokenUsage | null;
  costNanoUsd: number;
  headers: Record<string, string | string[] | undefined>;
  body: Record<string, unknown>;
}

export interface ScriptedProvider {
  url: string;
  port: number;
  /** what was served and billed, per key and in total */
  bill(): Bill;
  calls(): readonly ServedCall[];
  setScenario(s: Scenario): void;
  /** Price models its sheet does not list (a run's own test models), as the `extraPrices` option does. */
  addPrices(models: Record<string, SheetEntry>): void;
  close(): Promise<void>;
}

/**
 * An Anthropic- and OpenAI-compatible server that plays scenarios and keeps an exact bill of what it served: the
 * provider-side truth the shim's ledger is checked against. Errors before any output are never billed; a cut or
 * errored stream is billed for the input and the content it sent.
 */
export async function startScriptedProvider(opts: ScriptedProviderOptions = {}): Promise<ScriptedProvider> {
  let scenario: Scenario = opts.scenario ?? { text: "ok" };
  let scriptPos = 0;
  let index = 0;
  const published = publishedSheet();
  const sheet: PriceSheet = {
    version: published.version,
    models: { ...published.models, ...opts.extraPrices },
  };
  const limiter = new RateLimiter(opts.limits);
  const served: ServedCall[] = [];
  const byKey = new Map<string, BillLine>();
  const total = emptyUsage();

  const pick = (req: ScriptedRequest): Reply => {
    if (typeof scenario === "function") return scenario(req);
    if (!Array.isArray(scenario)) return scenario;
    const r = scenario[Math.min(scriptPos++, scenario.length - 1)];
    return r ?? { text: "ok" };
  };

  const charge = (call: ServedCall, usage: TokenUsage | null) => {
    call.billed = usage;
    if (!usage) return;
    const entry = sheetEntry(sheet, call.model);
    if (!entry) throw new Error(`scripted provider: no price for ${call.model}`);
    const cost = billNanoUsd(entry, usage);
    call.costNanoUsd = cost;
    let line = byKey.get(call.key);
    if (!line) {
      line = emptyUsage();
      byKey.set(call.key, line);
    }
    for (const l of [line, total]) {
      l.calls += 1;
      l.inputTokens += usage.inputTokens;
      l.outputTokens += usage.outputTokens;
      l.cacheReadTokens += usage.cacheReadTokens;
      l.cacheWriteTokens += usage.cacheWriteTokens;
      l.reasoningTokens += usage.reasoningTokens;
      l.costNanoUsd += cost;
    }
    limiter.chargeOutput(call.key, usage.outputTokens);
  };

  const bill = (): Bill => ({
    priceVersion: sheet.version,
    total: { ...total },
    byKey: Object.fromEntries([...byKey].map(([k, v]) => [k, { ...v }])),
  });

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      handle(req, res, Buffer.concat(chunks)).catch((err: unknown) => {
        if (!res.headersSent) res.writeHead(500, { "content-type": "application/json" });
        res.end(JSON.stringify(anthropicErrorBody("api_error", String(err))));
      });
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse, raw: Buffer): Promise<void> {
    const path = (req.url ?? "/").split("?")[0] ?? "/";
    if (path === "/_bill") return json(res, 200, bill());
    if (req.method === "GET" && path.startsWith("/v1/organization")) {
      const admin = apiKey(req);
      if (!opts.adminKeys?.includes(admin))
        return json(
          res,
          401,
          errBody(
            path.includes("usage_report") ? "anthropic" : "openai",
            "authentication_error",
            "an admin key is required",
          ),
        );
      const query = new URL(req.url ?? "/", "http://x").searchParams;
      const r = usageReport(path, query, served);
      if (r) return json(res, r.status, r.body);
    }
    if (req.method === "HEAD" || (req.method === "GET" && path === "/")) return json(res, 200, { ok: true });
    if (req.method === "GET" && path === "/v1/models") {
      return json(res, 200, { object: "list", data: [{ id: "scripted", object: "model", type: "model" }] });
    }
    const route = routeOf(path);
    const key = apiKey(req);
    const provider: Provider = route?.provider ?? "anthropic";
    if (!route || req.method !== "POST")
      return json(res, 404, errBody(provider, "not_found_error", `no route ${path}`));
    if (opts.keys && !opts.keys.includes(key)) {
      return json(res, 401, errBody(provider, "authentication_error", "invalid x-api-key"));
    }
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(raw.toString("utf8")) as Record<string, unknown>;
    } catch {
      return json(res, 400, errBody(provider, "invalid_request_error", "body is not JSON"));
    }
    if (route.endpoint === "count_tokens") return json(res, 200, { input_tokens: approxTokens(raw.length) });
    const sreq: ScriptedRequest = {
      provider,
      endpoint: route.endpoint,
      path,
      key,
      body,
      bodyBytes: raw.length,
      headers: req.headers,
      index: index++,
    };
    // The provider's own limits come first: a rate-limited request consumes no scripted reply.
    const wait = limiter.admit(key, approxTokens(raw.length));
    const rl = limiter.headers(provider, key);
    const reply: Reply = wait > 0 ? { text: "" } : pick(sreq);
    const p = plan(sreq, reply);
    const stream = body.stream === true;
    if (!sheetEntry(sheet, p.model)) {
      const msg = `model: ${p.model}`;
      return json(
        res,
        404,
        provider === "anthropic"
          ? anthropicErrorBody("not_found_error", msg)
          : openaiErrorBody(
              `The model \`${p.model}\` does not exist`,
              "invalid_request_error",
              "model_not_found",
            ),
      );
    }
    const call: ServedCall = {
      index: sreq.index,
      provider,
      endpoint: route.endpoint,
      path,
      key,
      atMs: Date.now(),
      model: p.model,
      stream,
      status: 200,
      outcome: "ok",
      billed: null,
      costNanoUsd: 0,
      headers: req.headers,
      body,
    };
    served.push(call);
    if (reply.firstByteDelayMs) await sleep(reply.firstByteDelayMs);
    if (wait > 0) {
      call.status = 429;
      call.outcome = "rate_limited";
      return json(res, 429, errBody(provider, "rate_limit_error", "rate limited"), {
        ...rl,
        "retry-after": String(Math.ceil(wait / 1000)),
      });
    }
    if (reply.error) {
      const e = reply.error;
      call.status = e.status;
      call.outcome = e.status === 429 ? "rate_limited" : "error";
      const headers: Record<string, string> = { ...rl };
      if (e.retryAfterS !== undefined && !e.spendLimit) headers["retry-after"] = String(e.retryAfterS);
      return json(res, e.status, errorFor(provider, e), headers);
    }
    if (!stream) {
      const out =
        route.endpoint === "messages"
          ? anthropicJson(p)
          : route.endpoint === "chat_completions"
            ? chatJson(p)
            : responsesJson(p);
      charge(call, fullUsage(p));
      return json(res, 200, out, rl);
    }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", ...rl });
    if (reply.overloadedInStream) {
      call.outcome = "error";
      const s = scriptFor(route.endpoint, p, body);
      res.end(s.errorEvent("overloaded_error", "Overloaded"));
      return;
    }
    await playStream(res, scriptFor(route.endpoint, p, body), reply, p, call);
  }

  async function playStream(
    res: ServerResponse,
    s: StreamScript,
    reply: Reply,
    p: Plan,
    call: ServedCall,
  ): Promise<void> {
    const stopAt = reply.cutAfterDeltas ?? reply.errorAfterDeltas;
    const delay = reply.deltaDelayMs ?? 0;
    let sentBytes = 0;
    let out = s.head.join("");
    const flush = async () => {
      if (out === "") return;
      const text = out;
      out = "";
      await new Promise<void>((resolve) => res.write(text, () => resolve()));
    };
    if (delay > 0) await flush();
    for (let i = 0; i < s.deltas.length; i++) {
      if (stopAt !== undefined && i >= stopAt) break;
      const d = s.deltas[i]!;
      out += d.text;
      sentBytes += d.bytes;
      if (delay > 0) {
        await flush();
        await sleep(delay);
      }
    }
    if (stopAt !== undefined && stopAt < s.deltas.length) {
      if (reply.errorAfterDeltas !== undefined) {
        call.outcome = "error";
        out += s.errorEvent("api_error", "Internal server error");
        charge(call, cutUsage(p, sentBytes));
        await flush();
        res.end();
        return;
      }
      call.outcome = "cut";
      charge(call, cutUsage(p, sentBytes));
      await flush();
      // Drop the connection without the closing chunk: the client sees a stream cut midway.
      res.socket?.destroy();
      return;
    }
    out += s.tail.join("");
    charge(call, fullUsage(p));
    await flush();
    res.end();
  }

  await new Promise<void>((resolve) => server.listen(opts.port ?? 0, opts.host ?? "127.0.0.1", resolve));
  server.keepAliveTimeout = 60_000;
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    bill,
    calls: () => served,
    setScenario(s) {
      scenario = s;
      scriptPos = 0;
    },
    addPrices(models) {
      for (const [k, v] of Object.entries(models))
        if (!Object.hasOwn(published.models, k)) sheet.models[k] = v;
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function scriptFor(endpoint: Endpoint, p: Plan, body: Record<string, unknown>): StreamScript {
  if (endpoint === "messages") return anthropicStream(p);
  if (endpoint === "responses") return responsesStream(p);
  const so = body.stream_options as { include_usage?: unknown } | undefined;
  return chatStream(p, so?.include_usage === true);
}

function apiKey(req: IncomingMessage): string {
  const x = req.headers["x-api-key"];
  if (typeof x === "string" && x !== "") return x;
  const auth = req.headers.authorization;
  if (typeof auth === "string" && /^bearer\s+/i.test(auth)) return auth.replace(/^bearer\s+/i, "");
  return "";
}

function errBody(provider: Provider, type: string, message: string): Record<string, unknown> {
  return provider === "anthropic" ? anthropicErrorBody(type, message) : openaiErrorBody(message, type, type);
}

const DEFAULT_TYPES: Record<number, string> = {
  400: "invalid_request_error",
  401: "authentication_error",
  429: "rate_limit_error",
  500: "api_error",
  503: "api_error",
  529: "overloaded_error",
};

function errorFor(provider: Provider, e: NonNullable<Reply["error"]>): Record<string, unknown> {
  const type = e.type ?? DEFAULT_TYPES[e.status] ?? "api_error";
  const message = e.message ?? `scripted ${e.status}`;
  if (e.spendLimit) {
    return provider === "anthropic"
      ? {
          type: "error",
          error: {
            type: "rate_limit_error",
            message,
            details: { error_code: "enforced_spend_limit_reached" },
          },
        }
      : openaiErrorBody(message, "insufficient_quota", "insufficient_quota");
  }
  return errBody(provider, type, message);
}

function json(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
