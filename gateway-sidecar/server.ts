import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Agent, request } from "undici";
import { AttributionHeaders } from "../protocol/headers.js";
import { type Logger, silentLogger } from "../protocol/log.js";
import type { Pacer } from "../protocol/pacer.js";
import { AnthropicStreamMeter, anthropicJsonResult } from "../providers/anthropic.js";
import { anthropicErrorBody, openaiErrorBody, shimError } from "../providers/errors.js";
import { type JsonMembers, readMembers, withMembers } from "../providers/json-members.js";
import { ChatStreamMeter, openaiJsonResult, ResponsesStreamMeter } from "../providers/openai.js";
import { PriceTable } from "../providers/pricing.js";
import { SseParser } from "../providers/sse.js";
import {
  approxTokens,
  type Endpoint,
  type MeterResult,
  OUTPUT_CAP_FIELDS,
  type Provider,
} from "../providers/types.js";
import type { Db } from "../store/db.js";
import { nanoToUsd, usdToNano } from "../store/money.js";
import { getRunMetadata } from "../store/results.js";
import { runForKey } from "./keys.js";
import { reserveSpend, type SpendStatus, settleSpend } from "./spend.js";

/**
 * A gateway replica. Stateless: keys, the spend log and the caps live in PostgreSQL, rate-limit facts go to the
 * pacer, so any replica serves any call and replicas come and go without changing a total.
 *
 * Per call: key → run (401 if unknown or revoked, same answer either way); alias → upstream (403 if the alias is
 * not this run's, or does not exist — the same answer, so nothing is learnt about other runs); worst-case cost
 * reserved against the run's cap in the spend log (402 billing error, provider-shaped, when it would not fit);
 * forwarded with the upstream's key, which only the gateway holds; rate-limit headers fed to the pacer; usage
 * metered from the response as it streams through untouched; the row settled to the metered cost.
 */

export interface Upstream {
  provider: Provider;
  /** e.g. https://api.anthropic.com or http://litellm:4000 (no /v1) */
  baseUrl: string;
  apiKey: string;
}

export interface AliasDef {
  upstream: Upstream;
  /** The model id sent upstream (default: the alias itself). */
  model?: string;
  /** The pacer pool the alias draws on (default: the alias). */
  pool?: string;
  /** Runs whose keys may use the alias; absent = any run's key. */
  runs?: string[];
}

export interface GatewayOptions {
  db: Db;
  /** Static aliases, and/or a resolver for aliases made per run. */
  aliases?: Record<string, AliasDef>;
  resolveAlias?: (alias: string) => Promise<AliasDef | undefined> | AliasDef | undefined;
  /**
   * The run's spend cap in nano-USD, undefined for none. Default: `budget_usd` of the run's config in
   * run_metadata, cached for capCacheMs.
   */
  runCapNanoUsd?: (run: string) => Promise<number | undefined>;
  capCacheMs?: number;
  pacer?: Pacer;
  prices?: PriceTable;
  /** Output tokens reserved when a request sets no max (default 8192). */
  defaultMaxOutputTokens?: number;
  port?: number;
  host?: string;
  log?: Logger;
  maxBodyBytes?: number;
}

export interface Gateway {
  url: string;
  port: number;
  /** Stop accepting, let calls in flight finish (drain). `{ abort: true }`: cut everything now, like a crash. */
  close(opts?: { abort?: boolean }): Promise<void>;
}

/** Headers a caller (the shim) may send to attribute a call; never forwarded upstream. */
export const GatewayHeaders = AttributionHeaders;

const ROUTES: Record<string, { provider: Provider; endpoint: Endpoint }> = {
  "/v1/messages": { provider: "anthropic", endpoint: "messages" },
  "/v1/messages/count_tokens": { provider: "anthropic", endpoint: "count_tokens" },
  "/v1/chat/completions": { provider: "openai", endpoint: "chat_completions" },
  "/v1/responses": { provider: "openai", endpoint: "responses" },
};

const HOP = new Set([
  "connection",
  "keep-alive",
  "transfer-encoding",
  "upgrade",
  "proxy-connection",
  "te",
  "trailer",
  "host",
  "content-length",
  "authorization",
  "x-api-key",
  GatewayHeaders.cell,
  GatewayHeaders.trace,
]);

export async function startGateway(opts: GatewayOptions): Promise<Gateway> {
  const log = opts.log ?? silentLogger();
  const prices = opts.prices ?? new PriceTable();
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: 256 });
  const inflight = new Set<AbortController>();
  const capCache = new Map<string, { atMs: number; cap: number | undefined }>();
  const capFor = async (run: string): Promise<number | undefined> => {
    const hit = capCache.get(run);
    if (hit && Date.now() - hit.atMs < (opts.capCacheMs ?? 5000)) return hit.cap;
    const cap = opts.runCapNanoUsd ? await opts.runCapNanoUsd(run) : await capFromRunConfig(opts.db, run);
    capCache.set(run, { atMs: Date.now(), cap });
    return cap;
  };
  // Own keys only: the alias is whatever model name the caller sent (`constructor` included).
  const aliasFor = async (alias: string): Promise<AliasDef | undefined> =>
    (opts.aliases && Object.hasOwn(opts.aliases, alias) ? opts.aliases[alias] : undefined) ??
    (opts.resolveAlias ? await opts.resolveAlias(alias) : undefined);

  // Calls being handled, including their spend-log write after the answer: close() waits for these.
  const handlers = new Set<Promise<void>>();
  const server = createServer((req, res) => {
    const h = handle(req, res)
      .catch((err: unknown) => {
        log.error({ err }, "gateway: call failed");
        if (res.headersSent) res.destroy();
        else if (err instanceof NotForwarded) {
          // Our own store failed before the call went anywhere: nothing was spent, and the caller may try again
          // (the shim and the providers' SDKs retry an overload; they treat a 502 as the provider's failure).
          const e = shimError(
            providerOf(req),
            "overloaded",
            "evalfleet gateway: its database is unavailable",
          );
          res.setHeader("retry-after", "1");
          send(res, e.status, e.body);
        } else {
          const e = shimError(providerOf(req), "upstream", "gateway error");
          send(res, e.status, e.body);
        }
      })
      .finally(() => handlers.delete(h));
    handlers.add(h);
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // Set once the request has gone upstream: a failure after that may have been billed.
    const call = { forwarded: false };
    try {
      await handleCall(req, res, call);
    } catch (err) {
      throw res.headersSent || call.forwarded ? err : new NotForwarded(err);
    }
  }

  async function handleCall(
    req: IncomingMessage,
    res: ServerResponse,
    call: { forwarded: boolean },
  ): Promise<void> {
    // Watched from the start: a caller that leaves before its call is forwarded must not have it forwarded.
    const ac = new AbortController();
    const onClientGone = () => {
      if (!res.writableFinished) ac.abort();
    };
    res.once("close", onClientGone);
    const path = (req.url ?? "/").split("?")[0] ?? "/";
    const route = ROUTES[path];
    const provider = route?.provider ?? providerOf(req);
    const run = await runForKey(opts.db, presentedKey(req));
    if (!run) return send(res, 401, unauthorized(provider));
    if (!route || req.method !== "POST") return send(res, 404, notFound(provider, path));
    const raw = await readBody(req, opts.maxBodyBytes ?? 32 * 1024 * 1024);
    if (raw === undefined) return send(res, 413, badRequest(provider, "request body too large"));
    // The model and the output cap are all the gateway reads: the conversation is neither parsed nor re-serialised.
    const body = readMembers(raw, GATEWAY_READS);
    if (typeof body === "string") return send(res, 400, badRequest(provider, body));
    const modelMember = body.members.get("model")?.value;
    const alias = typeof modelMember === "string" ? modelMember : "";
    const def = alias ? await aliasFor(alias) : undefined;
    if (!def || (def.runs && !def.runs.includes(run))) return send(res, 403, forbidden(provider, alias));
    if (def.upstream.provider !== provider)
      return send(
        res,
        400,
        badRequest(provider, `model ${alias} is served over the ${def.upstream.provider} API`),
      );
    const model = def.model ?? alias;
    const pool = def.pool ?? alias;
    const outBody = model === alias ? raw : withMembers(body, new Map([["model", model]]));
    const metered = route.endpoint !== "count_tokens";

    const requestId = randomUUID();
    let reserveNanoUsd = 0;
    if (metered) {
      reserveNanoUsd = prices.cost(model, {
        inputTokens: approxTokens(raw.length),
        outputTokens: maxOutputTokens(body, opts.defaultMaxOutputTokens ?? 8192),
        cacheReadTokens: 0,
        cacheWriteTokens: 0,
        cacheWrite1hTokens: 0,
        reasoningTokens: 0,
      }).costNanoUsd;
      const reserved = await reserveSpend(
        opts.db,
        {
          requestId,
          run,
          cellId: header(req, GatewayHeaders.cell),
          traceId: header(req, GatewayHeaders.trace),
          alias,
          model,
        },
        reserveNanoUsd,
        await capFor(run),
      );
      if (!reserved.ok) {
        const e = shimError(
          provider,
          "budget_exceeded",
          `run spend cap of $${nanoToUsd(reserved.capNanoUsd)} reached: $${nanoToUsd(reserved.spentNanoUsd)} spent, this call may cost up to $${nanoToUsd(reserveNanoUsd)}`,
        );
        return send(res, e.status, e.body);
      }
    }
    if (ac.signal.aborted) {
      // Gone before the forward (e.g. while its reservation was written): nothing reaches the provider, nothing can
      // be billed.
      if (metered) await settleSpend(opts.db, requestId, "client_closed", null, 0);
      return;
    }
    inflight.add(ac);
    call.forwarded = true;

    const logCall = async (st: SpendStatus, r: MeterResult | undefined): Promise<void> => {
      if (st === "lost" || st === "client_closed") {
        // The provider may have generated (and billed) more than reached us before the call was cut on our side:
        // the worst-case reservation stays as the cost, with what was metered kept for the record.
        await settleSpend(opts.db, requestId, st, r?.usage ?? null, reserveNanoUsd, r?.model);
        return;
      }
      const usage = r?.usage ?? null;
      // An error before any output is not billed; anything the provider did send is.
      const billable =
        usage !== null && (st !== "error" || (r?.sawContent ?? false) || usage.outputTokens > 0);
      const costNanoUsd = billable ? prices.cost(model, usage).costNanoUsd : 0;
      await settleSpend(opts.db, requestId, st, billable ? usage : null, costNanoUsd, r?.model);
    };
    let logged = false;
    let status: SpendStatus = "lost";
    let result: MeterResult | undefined;
    let meter: ReturnType<typeof streamMeter> | undefined;
    let gotHeaders = false;
    try {
      const up = await request(`${def.upstream.baseUrl.replace(/\/$/, "")}${req.url ?? path}`, {
        method: "POST",
        headers: upstreamHeaders(req, def.upstream, outBody.length),
        body: outBody,
        dispatcher: agent,
        signal: ac.signal,
      });
      gotHeaders = true;
      const respHeaders = flatHeaders(up.headers);
      opts.pacer?.observe({ pool, status: up.statusCode, headers: respHeaders });
      res.writeHead(up.statusCode, passHeaders(respHeaders));
      const isSse = (respHeaders["content-type"] ?? "").includes("text/event-stream");
      meter = isSse && metered ? streamMeter(route.endpoint) : undefined;
      const m = meter;
      const parser = m ? new SseParser((ev) => m.onEvent(ev)) : undefined;
      const chunks: Buffer[] = [];
      for await (const chunk of up.body) {
        const buf = chunk as Buffer;
        if (parser) parser.push(buf);
        else if (metered) chunks.push(buf);
        if (!res.write(buf)) await drained(res);
      }
      if (metered) {
        const text = Buffer.concat(chunks).toString("utf8");
        result = m
          ? m.result()
          : route.endpoint === "messages"
            ? anthropicJsonResult(text)
            : openaiJsonResult(text, route.endpoint === "responses" ? "responses" : "chat");
        status = up.statusCode >= 400 ? "error" : result.complete ? "ok" : result.error ? "error" : "cut";
        // Log before the answer ends: once a caller holds its full answer, the gateway's row is final, so the
        // reconciliation at the attempt's end never reads a pending row of a call that completed.
        logged = true;
        await logCall(status, result).catch((err: unknown) =>
          log.error({ err, requestId }, "gateway: spend log write failed; the reservation stands"),
        );
      }
      res.end();
    } catch (err) {
      // A stream the provider cut is billed for what the meter saw (all it sent); a call cut on our side, or whose
      // outcome is unknown (no response, a JSON body cut short), keeps its worst-case reservation as its cost.
      if (gotHeaders && meter) {
        result = meter.result();
        status = ac.signal.aborted ? "client_closed" : "cut";
      } else status = "lost";
      // Refused connection: nothing reached the provider, nothing can be billed.
      if (!gotHeaders && (err as { code?: string }).code === "ECONNREFUSED") status = "error";
      log.warn({ err: (err as Error).message, alias, status }, "gateway: upstream call did not complete");
      if (!res.headersSent) {
        const e = shimError(provider, "upstream", "upstream unavailable");
        send(res, e.status, e.body);
      } else res.destroy();
    } finally {
      inflight.delete(ac);
      res.off("close", onClientGone);
    }
    if (metered && !logged) await logCall(status, result);
  }

  await new Promise<void>((resolve) => server.listen(opts.port ?? 0, opts.host ?? "127.0.0.1", resolve));
  server.keepAliveTimeout = 65_000;
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://${opts.host ?? "127.0.0.1"}:${port}`,
    port,
    async close(closeOpts = {}) {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      // Keep-alive connections go idle one by one as their calls finish: close each as soon as it does.
      server.closeIdleConnections();
      const sweep = setInterval(() => server.closeIdleConnections(), 50);
      if (closeOpts.abort) {
        for (const ac of inflight) ac.abort();
        server.closeAllConnections();
      }
      await closed;
      // A drain lets every call finish and log; after an abort, handlers only have their spend-log write left.
      const settled = Promise.allSettled([...handlers]);
      await (closeOpts.abort
        ? Promise.race([settled, new Promise((r) => setTimeout(r, 5000).unref())])
        : settled);
      clearInterval(sweep);
      await agent.close().catch(() => undefined);
    },
  };
}

async function capFromRunConfig(db: Db, run: string): Promise<number | undefined> {
  const meta = await getRunMetadata(db, run);
  if (!meta) return undefined;
  const budget = (JSON.parse(meta.configJson) as { budget_usd?: unknown }).budget_usd;
  return typeof budget === "number" ? Number(usdToNano(budget)) : undefined;
}

const GATEWAY_READS = new Set<string>(["model", ...OUTPUT_CAP_FIELDS]);

function maxOutputTokens(body: JsonMembers, fallback: number): number {
  for (const k of OUTPUT_CAP_FIELDS) {
    const v = body.members.get(k)?.value;
    if (typeof v === "number" && Number.isFinite(v) && v > 0) return Math.floor(v);
  }
  return fallback;
}

function streamMeter(endpoint: Endpoint): {
  onEvent(ev: Parameters<AnthropicStreamMeter["onEvent"]>[0]): unknown;
  result(): MeterResult;
} {
  if (endpoint === "messages") return new AnthropicStreamMeter();
  if (endpoint === "responses") return new ResponsesStreamMeter();
  return new ChatStreamMeter(false);
}

function providerOf(req: IncomingMessage): Provider {
  return (req.url ?? "").startsWith("/v1/messages") || req.headers["x-api-key"] !== undefined
    ? "anthropic"
    : "openai";
}

function presentedKey(req: IncomingMessage): string {
  const x = req.headers["x-api-key"];
  if (typeof x === "string" && x !== "") return x;
  const auth = req.headers.authorization;
  return typeof auth === "string" ? auth.replace(/^bearer\s+/i, "") : "";
}

function header(req: IncomingMessage, name: string): string | null {
  const v = req.headers[name];
  return typeof v === "string" && v !== "" ? v : null;
}

function upstreamHeaders(req: IncomingMessage, up: Upstream, length: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.headers)) {
    if (v === undefined || HOP.has(k)) continue;
    out[k] = Array.isArray(v) ? v.join(", ") : v;
  }
  if (up.provider === "anthropic") out["x-api-key"] = up.apiKey;
  else out.authorization = `Bearer ${up.apiKey}`;
  out["content-length"] = String(length);
  return out;
}

function flatHeaders(h: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h))
    if (v !== undefined) out[k.toLowerCase()] = Array.isArray(v) ? v.join(", ") : v;
  return out;
}

function passHeaders(h: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) if (!HOP.has(k) || k === "content-length") out[k] = v;
  return out;
}

/** Until the client takes more bytes — or is gone, when 'drain' never comes (the upstream is aborted then). */
function drained(res: ServerResponse): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      res.off("drain", done);
      res.off("close", done);
      resolve();
    };
    res.once("drain", done);
    res.once("close", done);
  });
}

function readBody(req: IncomingMessage, maxBytes: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let n = 0;
    let over = false;
    req.on("data", (c: Buffer) => {
      n += c.length;
      if (n > maxBytes) over = true;
      else chunks.push(c);
    });
    req.on("end", () => resolve(over ? undefined : Buffer.concat(chunks)));
    req.on("error", reject);
    // The client went away mid-body: 'end' will never come.
    req.on("close", () => {
      if (!req.complete) reject(new Error("client closed before the request body ended"));
    });
  });
}

/** A call that failed before it was forwarded (the gateway's database, most likely): retryable, unbilled. */
class NotForwarded extends Error {
  constructor(cause: unknown) {
    super(`not forwarded: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
  }
}

function send(res: ServerResponse, status: number, body: string): void {
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

// One body per answer, whatever the reason behind it: a revoked key and a key that never existed look alike, and
// an alias of another run looks like an alias that does not exist.
function unauthorized(p: Provider): string {
  return JSON.stringify(
    p === "anthropic"
      ? anthropicErrorBody("authentication_error", "invalid x-api-key")
      : openaiErrorBody("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
  );
}

function forbidden(p: Provider, alias: string): string {
  const msg = `this key may not use model ${JSON.stringify(alias)}`;
  return JSON.stringify(
    p === "anthropic"
      ? anthropicErrorBody("permission_error", msg)
      : openaiErrorBody(msg, "invalid_request_error", "model_not_allowed"),
  );
}

function notFound(p: Provider, path: string): string {
  const msg = `no route ${path}`;
  return JSON.stringify(
    p === "anthropic"
      ? anthropicErrorBody("not_found_error", msg)
      : openaiErrorBody(msg, "invalid_request_error", "not_found"),
  );
}

function badRequest(p: Provider, msg: string): string {
  return shimError(p, "bad_request", msg).body;
}
