import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Dispatcher } from "undici";
import { type LedgerCall, MessageTypes } from "../../protocol/messages.js";
import type { Admission } from "../../protocol/pacer.js";
import { redactSecrets } from "../../protocol/redact.js";
import { AnthropicStreamMeter, anthropicJsonResult } from "../../providers/anthropic.js";
import {
  errorFromText,
  isOverload,
  isSpendLimit,
  type ShimErrorKind,
  shimError,
} from "../../providers/errors.js";
import { ChatStreamMeter, openaiJsonResult, ResponsesStreamMeter } from "../../providers/openai.js";
import { type SseEvent, SseParser } from "../../providers/sse.js";
import { emptyUsage, type MeterResult, type TokenUsage } from "../../providers/types.js";
import { backoffMs, sleep } from "./backoff.js";
import type { ShimContext } from "./context.js";
import {
  type CallRequest,
  clamp,
  clientHeaders,
  estimateInputTokens,
  parseCall,
  type Route,
  upstreamBody,
  upstreamHeaders,
} from "./request.js";

type Status = LedgerCall["status"];

/** One try at a call, as it lands in the ledger. */
interface TryOutcome {
  status: Status;
  httpStatus: number | null;
  usage: TokenUsage;
  estimated: boolean;
  model: string | undefined;
  startedAt: number;
  latencyMs: number;
  ttfbMs: number | null;
}

interface StreamMeter {
  onEvent(ev: SseEvent): boolean | undefined;
  result(): MeterResult;
}

function streamMeter(call: CallRequest): StreamMeter {
  if (call.route.endpoint === "messages") return new AnthropicStreamMeter() as StreamMeter;
  if (call.route.endpoint === "responses") return new ResponsesStreamMeter() as StreamMeter;
  return new ChatStreamMeter(call.hideUsage);
}

function jsonResult(call: CallRequest, text: string): MeterResult {
  if (call.route.endpoint === "messages") return anthropicJsonResult(text);
  return openaiJsonResult(text, call.route.endpoint === "responses" ? "responses" : "chat");
}

function sendError(res: ServerResponse, call: { route: Route }, kind: ShimErrorKind, message: string): void {
  if (res.headersSent || res.destroyed) return;
  const e = shimError(call.route.provider, kind, message);
  res.writeHead(e.status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(e.body),
  });
  res.end(e.body);
}

/**
 * A metered model call, in the order: pacer admission → budget check (refuse or clamp) → forward with the
 * run's key, retrying overloads → usage → price → totals → one ledger row per try → progress → caps.
 */
export async function handleModelCall(
  ctx: ShimContext,
  req: IncomingMessage,
  res: ServerResponse,
  route: Route,
  raw: Buffer,
): Promise<void> {
  const parsed = parseCall(route, raw);
  if (typeof parsed === "string") return sendError(res, { route }, "bad_request", parsed);
  const call = parsed;
  const abort = new AbortController();
  res.on("close", () => {
    if (!res.writableFinished) abort.abort();
  });
  const estIn = estimateInputTokens(raw.length);
  const aliasModel = ctx.aliases[call.model];

  // 1. pacer admission
  let admission: Admission;
  try {
    admission = await ctx.pacer.admit(
      { pool: ctx.pool, inputTokens: estIn, outputTokens: call.maxTokens ?? ctx.defaultMaxOutputTokens },
      abort.signal,
    );
  } catch (err) {
    ctx.log.warn({ err: String(err) }, "pacer admission failed");
    return sendError(res, call, "overloaded", "evalfleet: admission failed");
  }
  const pacerWaitMs = Math.max(0, Math.round(admission.waitedMs));
  ctx.state.totals.pacerWaitMs += pacerWaitMs;

  // 2. budget: refuse what cannot fit even at its smallest, clamp what the remainder cannot pay for
  const priceModel = aliasModel ?? call.model;
  const refusal = ctx.state.totals.capReason ?? budgetVerdict(ctx, call, priceModel, estIn);
  if (refusal) {
    admission.refund();
    const now = Date.now();
    land(ctx, call, pacerWaitMs, 0, {
      status: "refused",
      httpStatus: null,
      usage: emptyUsage(),
      estimated: false,
      model: undefined,
      startedAt: now,
      latencyMs: 0,
      ttfbMs: null,
    });
    ctx.state.totals.refused++;
    ctx.fireCap(refusal);
    return sendError(
      res,
      call,
      refusal,
      `evalfleet: attempt ${refusal === "budget_exceeded" ? "budget" : "turn limit"} reached`,
    );
  }
  const reserve = reservation(ctx, call, priceModel, estIn);
  ctx.state.reservedNanoUsd += reserve;

  let spent = false;
  let lastUsage = emptyUsage();
  try {
    const body = upstreamBody(call);
    const headers = upstreamHeaders(req.headers, route.provider, ctx.key);
    const path = ctx.basePath + (req.url ?? "/");
    for (let n = 0; ; n++) {
      const t = await tryOnce(ctx, call, res, path, headers, body, abort.signal);
      const outcome = t.outcome;
      land(ctx, call, n === 0 ? pacerWaitMs : 0, n, outcome);
      if (outcome.usage.inputTokens + outcome.usage.outputTokens > 0) {
        spent = true;
        lastUsage = outcome.usage;
      }
      if (t.next === "done") break;
      if (t.next === "spend_limit") {
        ctx.fireCap("budget_exceeded");
        sendError(res, call, "budget_exceeded", "evalfleet: the run's provider spend limit is reached");
        break;
      }
      if (n >= ctx.retry.maxRetries) {
        sendError(res, call, "overloaded", "evalfleet: upstream overloaded; retries exhausted");
        break;
      }
      if (!(await sleep(backoffMs(ctx.retry, n, t.headers ?? {}), abort.signal))) break;
    }
  } finally {
    ctx.state.reservedNanoUsd -= reserve;
    if (spent) {
      admission.settle({
        inputTokens: lastUsage.inputTokens - lastUsage.cacheReadTokens,
        outputTokens: lastUsage.outputTokens,
        cacheReadTokens: lastUsage.cacheReadTokens,
        cacheWriteTokens: lastUsage.cacheWriteTokens,
      });
    } else admission.refund();
    const cap = ctx.state.reached();
    if (cap) ctx.fireCap(cap);
  }
}

/** Why the call must be refused, or null; clamps the output cap when the remainder cannot pay for it. */
function budgetVerdict(
  ctx: ShimContext,
  call: CallRequest,
  model: string,
  estIn: number,
): "budget_exceeded" | null {
  const remaining = ctx.state.remainingNanoUsd();
  if (remaining === null) return null;
  if (remaining < ctx.prices.minCostNanoUsd(model, estIn)) return "budget_exceeded";
  const affordable = Math.max(1, ctx.prices.affordableOutputTokens(model, estIn, remaining));
  const requested = call.maxTokens ?? ctx.defaultMaxOutputTokens;
  if (requested > affordable) {
    clamp(call, affordable);
    ctx.state.totals.clamps++;
  }
  return null;
}

/** The worst case this call can cost (capped at what is left): reserved while it is in flight. */
function reservation(ctx: ShimContext, call: CallRequest, model: string, estIn: number): bigint {
  const remaining = ctx.state.remainingNanoUsd();
  if (remaining === null) return 0n;
  const worst = ctx.prices.cost(model, {
    ...emptyUsage(),
    inputTokens: estIn,
    outputTokens: call.maxTokens ?? ctx.defaultMaxOutputTokens,
  }).costNanoUsd;
  const w = BigInt(worst);
  return w < remaining ? w : remaining > 0n ? remaining : 0n;
}

interface Try {
  outcome: TryOutcome;
  /** done: the client has its answer; retry: wait and try again; spend_limit: terminal */
  next: "done" | "retry" | "spend_limit";
  headers?: Record<string, string | string[] | undefined>;
}

const RETRY_STATUSES = new Set([429, 503, 529]);

async function tryOnce(
  ctx: ShimContext,
  call: CallRequest,
  res: ServerResponse,
  path: string,
  headers: Record<string, string | string[]>,
  body: Buffer,
  signal: AbortSignal,
): Promise<Try> {
  const startedAt = Date.now();
  const t0 = performance.now();
  const outcome = (o: Partial<TryOutcome> & { status: Status }): TryOutcome => ({
    httpStatus: null,
    usage: emptyUsage(),
    estimated: false,
    model: undefined,
    startedAt,
    latencyMs: Math.round(performance.now() - t0),
    ttfbMs: null,
    ...o,
  });
  let up: Dispatcher.ResponseData;
  try {
    up = await ctx.upstream.request({ path, method: "POST", headers, body, signal });
  } catch (err) {
    if (signal.aborted) return { outcome: outcome({ status: "error" }), next: "done" };
    ctx.log.warn({ err: redactSecrets(String(err), [ctx.key]) }, "upstream request failed");
    return { outcome: outcome({ status: "error" }), next: "retry" };
  }
  const status = up.statusCode;
  ctx.pacer.observe({ pool: ctx.pool, status, headers: flatHeaders(up.headers) });
  if (RETRY_STATUSES.has(status)) {
    const text = await up.body.text().catch(() => "");
    const err = errorFromText(text);
    const o = outcome({ status: status === 429 ? "rate_limited" : "overloaded", httpStatus: status });
    if (isSpendLimit(err)) return { outcome: { ...o, status: "error" }, next: "spend_limit" };
    return { outcome: o, next: "retry", headers: up.headers };
  }
  const ctype = String(up.headers["content-type"] ?? "");
  if (status !== 200 || !ctype.includes("text/event-stream")) {
    let buf: Buffer;
    try {
      buf = Buffer.from(await up.body.arrayBuffer());
    } catch {
      return { outcome: outcome({ status: "cut", httpStatus: status, estimated: true }), next: "done" };
    }
    const ttfbMs = Math.round(performance.now() - t0);
    if (!res.destroyed) {
      res.writeHead(status, { ...clientHeaders(up.headers), "content-length": buf.length });
      res.end(buf);
    }
    if (status !== 200)
      return { outcome: outcome({ status: "error", httpStatus: status, ttfbMs }), next: "done" };
    const m = jsonResult(call, buf.toString("utf8"));
    return {
      outcome: outcome({
        status: m.error ? "error" : "ok",
        httpStatus: status,
        usage: m.usage,
        model: m.model,
        ttfbMs,
      }),
      next: "done",
    };
  }
  return await pipeStream(call, res, up, body.length, signal, outcome, t0);
}

/** Pass an SSE stream through as it arrives, holding only the first event (an overload there is retried). */
async function pipeStream(
  call: CallRequest,
  res: ServerResponse,
  up: Dispatcher.ResponseData,
  sentBytes: number,
  signal: AbortSignal,
  outcome: (o: Partial<TryOutcome> & { status: Status }) => TryOutcome,
  t0: number,
): Promise<Try> {
  const meter = streamMeter(call);
  const hide = call.hideUsage;
  let first: SseEvent | undefined;
  let decided = false;
  const held: Array<string | Buffer> = [];
  const parser = new SseParser((ev) => {
    first ??= ev;
    const show = meter.onEvent(ev) !== false;
    if (!hide || !show) return;
    if (decided) res.write(ev.raw);
    else held.push(ev.raw);
  });
  let ttfbMs: number | null = null;
  let cut = false;
  const open = (): void => {
    decided = true;
    if (res.destroyed) return;
    res.writeHead(200, clientHeaders(up.headers));
    for (const h of held) res.write(h);
    held.length = 0;
  };
  try {
    for await (const chunk of up.body as AsyncIterable<Buffer>) {
      if (ttfbMs === null) ttfbMs = Math.round(performance.now() - t0);
      if (decided) {
        if (hide) parser.push(chunk);
        else {
          res.write(chunk);
          parser.push(chunk);
        }
        continue;
      }
      if (!hide) held.push(chunk);
      parser.push(chunk);
      if (first === undefined) continue;
      if (isOverloadFirst(first)) {
        up.body.destroy();
        return {
          outcome: outcome({ status: "overloaded", httpStatus: 200, ttfbMs }),
          next: "retry",
          headers: up.headers,
        };
      }
      open();
    }
  } catch {
    cut = true;
  }
  if (!decided) {
    if (first && isOverloadFirst(first)) {
      return {
        outcome: outcome({ status: "overloaded", httpStatus: 200, ttfbMs }),
        next: "retry",
        headers: up.headers,
      };
    }
    open();
  }
  if (cut || signal.aborted) res.destroy();
  else {
    if (hide && parser.pending) res.write(parser.pending);
    res.end();
  }
  const m = meter.result();
  const usage = { ...m.usage };
  const estimated = !m.reported;
  // Nothing reported the input: a stream that began (or was cut) is charged the request's estimate; one that opened
  // with an error was refused before any work.
  const began = first !== undefined && first.event !== "error" && !first.data.startsWith('{"error"');
  if (estimated && usage.inputTokens === 0 && (began || cut))
    usage.inputTokens = estimateInputTokens(sentBytes);
  const status: Status = cut || signal.aborted ? "cut" : m.error ? "error" : m.complete ? "ok" : "cut";
  return {
    outcome: outcome({ status, httpStatus: 200, usage, estimated, model: m.model, ttfbMs }),
    next: "done",
  };
}

function isOverloadFirst(ev: SseEvent): boolean {
  if (ev.event !== "error" && !ev.data.startsWith('{"error"') && !ev.data.includes('"type":"error"'))
    return false;
  const e = errorFromText(
    ev.data.startsWith('{"type":"error"') || ev.data.startsWith('{"error"') ? ev.data : "{}",
  );
  return isOverload(e) || e?.type === "overloaded_error";
}

function flatHeaders(h: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k in h) {
    const v = h[k];
    if (v !== undefined) out[k] = Array.isArray(v) ? v.join(", ") : v;
  }
  return out;
}

/** Price one try, add it to the totals and publish its ledger row. */
function land(
  ctx: ShimContext,
  call: CallRequest,
  pacerWaitMs: number,
  retries: number,
  o: TryOutcome,
): void {
  const model = ctx.aliases[call.model] ?? o.model ?? call.model;
  const priced = ctx.prices.cost(model, o.usage);
  ctx.state.add(o.usage, priced.costNanoUsd, {
    ok: o.status === "ok",
    estimated: o.estimated,
    retry: retries > 0,
  });
  ctx.ledger.publish({
    type: MessageTypes.ledgerCall,
    callId: randomUUID(),
    run: ctx.run,
    cellId: ctx.cell,
    attempt: ctx.attempt,
    traceId: ctx.traceId,
    model,
    alias: call.model,
    pool: ctx.pool,
    provider: call.route.provider,
    endpoint: call.route.endpoint,
    status: o.status,
    httpStatus: o.httpStatus,
    inputTokens: o.usage.inputTokens,
    outputTokens: o.usage.outputTokens,
    cacheReadTokens: o.usage.cacheReadTokens,
    cacheWriteTokens: o.usage.cacheWriteTokens,
    reasoningTokens: o.usage.reasoningTokens,
    costNanoUsd: priced.costNanoUsd,
    priceVersion: priced.priceVersion,
    latencyMs: o.latencyMs,
    ttfbMs: o.ttfbMs,
    pacerWaitMs,
    retries,
    clampedMaxTokens: call.clampedMaxTokens,
    estimated: o.estimated,
    costMode: ctx.costMode,
    startedAt: new Date(o.startedAt).toISOString(),
  });
  ctx.progress.mark();
}
