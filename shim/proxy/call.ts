import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { MessageTypes } from "../../protocol/messages.js";
import type { Admission } from "../../protocol/pacer.js";
import { type ShimErrorKind, shimError } from "../../providers/errors.js";
import { emptyUsage } from "../../providers/types.js";
import { backoffMs, sleep } from "./backoff.js";
import type { ShimContext } from "./context.js";
import {
  type CallRequest,
  clamp,
  estimateInputTokens,
  parseCall,
  type Route,
  upstreamBody,
  upstreamHeaders,
} from "./request.js";
import { type TryOutcome, UpstreamTry } from "./upstream.js";

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
  const signal = clientGone(req);
  let current: UpstreamTry | undefined;
  res.on("close", () => {
    if (!res.writableFinished) current?.abort();
  });
  const estIn = estimateInputTokens(raw.length);
  const aliasModel = aliasOf(ctx, call.model);

  // 1. pacer admission
  let admission: Admission;
  try {
    admission = await ctx.pacer.admit(
      { pool: ctx.pool, inputTokens: estIn, outputTokens: call.maxTokens ?? ctx.defaultMaxOutputTokens },
      signal,
    );
  } catch (err) {
    ctx.log.warn({ err: String(err) }, "pacer admission failed");
    return sendError(res, call, "overloaded", "evalfleet: admission failed");
  }
  const pacerWaitMs = Math.max(0, Math.round(admission.waitedMs));
  ctx.state.totals.pacerWaitMs += pacerWaitMs;

  // 2. budget: refuse what cannot fit even at its smallest, clamp what the remainder cannot pay for
  const priceModel = aliasModel ?? call.model;
  const refusal =
    ctx.state.totals.capReason ??
    (ctx.state.overTurns() ? "max_turns_exceeded" : budgetVerdict(ctx, call, priceModel, estIn));
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
    const headers = upstreamHeaders(req.headers, route.provider, ctx.key, {
      cell: ctx.cell,
      trace: ctx.traceId,
    });
    const path = ctx.basePath + (req.url ?? "/");
    for (let n = 0; ; n++) {
      const attempt = new UpstreamTry(ctx, call, res, body.length);
      current = attempt;
      ctx.upstream.dispatch({ path, method: "POST", headers, body }, attempt);
      const t = await attempt.result;
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
      if (!(await sleep(backoffMs(ctx.retry, n, t.headers ?? {}), signal))) break;
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

const gone = new WeakMap<Socket, AbortSignal>();

/**
 * Aborts when the client's connection closes. One controller per connection, not per call: a call ends with its
 * response or with its connection, and an AbortController per call was a measurable share of the shim's CPU.
 */
function clientGone(req: IncomingMessage): AbortSignal {
  const socket = req.socket;
  let signal = gone.get(socket);
  if (!signal) {
    const ac = new AbortController();
    signal = ac.signal;
    gone.set(socket, signal);
    if (socket.destroyed) ac.abort();
    else socket.once("close", () => ac.abort());
  }
  return signal;
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

/** The upstream model an alias stands for; own keys only, as the harness picks the name (`constructor`). */
function aliasOf(ctx: ShimContext, model: string): string | undefined {
  return Object.hasOwn(ctx.aliases, model) ? ctx.aliases[model] : undefined;
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

/** Price one try, add it to the totals and publish its ledger row. */
function land(
  ctx: ShimContext,
  call: CallRequest,
  pacerWaitMs: number,
  retries: number,
  o: TryOutcome,
): void {
  const model = aliasOf(ctx, call.model) ?? o.model ?? call.model;
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
