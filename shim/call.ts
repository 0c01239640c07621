import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { retry } from "../lib/retry.js";
import { AttributionHeaders } from "../protocol/headers.js";
import { MessageTypes } from "../protocol/messages.js";
import type { Admission } from "../protocol/pacer.js";
import { type ShimErrorKind, shimError } from "../providers/errors.js";
import { unknownPrice } from "../providers/pricing.js";
import type { Route } from "../providers/routes.js";
import { emptyTokenUsage } from "../providers/types.js";
import { retryAfterMs } from "./backoff.js";
import type { ShimContext } from "./context.js";
import {
  type CallRequest,
  clamp,
  estimateInputTokens,
  parseCall,
  upstreamBody,
  upstreamHeaders,
} from "./request.js";
import { type Try, type TryOutcome, UpstreamTry } from "./upstream.js";

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
  const priceModel = aliasModel ?? call.model;
  // A model nothing prices is never forwarded: its cost could not be metered, so no cap could hold.
  if (!ctx.prices.knows(priceModel)) {
    ctx.state.totals.refused++;
    return sendError(res, call, "bad_request", unknownPrice(call.model).message);
  }

  // 1. pacer admission
  let admission: Admission;
  try {
    admission = await ctx.pacer.admit(
      { pool: ctx.pool, inputTokens: estIn, outputTokens: call.maxTokens ?? ctx.defaultMaxOutputTokens },
      signal,
    );
  } catch (err) {
    ctx.log.warn({ err: String(err) }, "pacer admission failed");
    // The pacer's own reason (a pool nobody owns says what to do); never a secret.
    const why = err instanceof Error ? `: ${err.message}` : "";
    return sendError(res, call, "overloaded", `evalfleet: admission failed${why}`);
  }
  const pacerWaitMs = Math.max(0, Math.round(admission.waitedMs));
  ctx.state.totals.pacerWaitMs += pacerWaitMs;

  // 2. budget: refuse what cannot fit even at its smallest, clamp what the remainder cannot pay for
  const refusal =
    ctx.state.totals.capReason ??
    (ctx.state.overTurns() ? "max_turns_exceeded" : budgetVerdict(ctx, call, priceModel, estIn));
  if (refusal) {
    admission.refund();
    const now = Date.now();
    land(ctx, call, pacerWaitMs, 0, {
      status: "refused",
      httpStatus: null,
      usage: emptyTokenUsage(),
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
  let lastUsage = emptyTokenUsage();
  try {
    const body = upstreamBody(call);
    const headers = upstreamHeaders(req.headers, route.provider, ctx.key, {
      cell: ctx.cell,
      trace: ctx.traceId,
      attempt: ctx.attempt,
    });
    const path = ctx.basePath + (req.url ?? "/");
    const policy = ctx.retry;
    let last: Try;
    try {
      last = await retry(
        async (n) => {
          const attempt = new UpstreamTry(ctx, call, res, body.length);
          current = attempt;
          // One id per try, sent to the gateway and kept as the ledger row's: the two logs match call by call.
          const callId = randomUUID();
          ctx.upstream.dispatch(
            { path, method: "POST", headers: { ...headers, [AttributionHeaders.call]: callId }, body },
            attempt,
          );
          const t = await attempt.result;
          land(ctx, call, n === 0 ? pacerWaitMs : 0, n, t.outcome, callId);
          if (t.outcome.usage.inputTokens + t.outcome.usage.outputTokens > 0) {
            spent = true;
            lastUsage = t.outcome.usage;
          }
          return t;
        },
        {
          tries: policy.maxRetries + 1,
          baseMs: policy.baseDelayMs,
          maxMs: policy.maxDelayMs,
          jitter: 0.25,
          retryValue: (t) => t.next === "retry",
          delayFor: (f) => retryAfterMs(f.value?.headers ?? {}, policy.maxRetryAfterMs),
          signal,
        },
      );
    } catch (err) {
      // The client went away while we waited to try again: nothing more to answer.
      if (signal.aborted) return;
      throw err;
    }
    if (last.next === "spend_limit") {
      if (last.providerSpendLimit) ctx.state.totals.infraStop ??= "provider_spend_limit";
      ctx.fireCap("budget_exceeded");
      sendError(
        res,
        call,
        "budget_exceeded",
        "evalfleet: a spend cap is reached (the gateway's run or attempt cap, or the provider's spend limit)",
      );
    } else if (last.next === "retry") {
      ctx.state.totals.infraStop ??= "rate_limit_exhausted";
      sendError(res, call, "overloaded", "evalfleet: upstream overloaded; retries exhausted");
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
    ...emptyTokenUsage(),
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
  callId: string = randomUUID(),
): void {
  // Priced as the model the provider says served it when the table knows that id, else as the one asked for.
  const asked = aliasOf(ctx, call.model) ?? call.model;
  const model = aliasOf(ctx, call.model) ?? o.model ?? call.model;
  const priced = ctx.prices.cost(ctx.prices.knows(model) ? model : asked, o.usage, o.startedAt);
  ctx.state.add(o.usage, priced.costNanoUsd, {
    ok: o.status === "ok",
    estimated: o.estimated,
    retry: retries > 0,
  });
  ctx.state.totals.pacerWaitMs += o.gatewayWaitMs ?? 0;
  ctx.ledger.publish({
    type: MessageTypes.ledgerCall,
    callId,
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
    pacerWaitMs: pacerWaitMs + (o.gatewayWaitMs ?? 0),
    retries,
    clampedMaxTokens: call.clampedMaxTokens,
    estimated: o.estimated,
    costMode: ctx.costMode,
    startedAt: new Date(o.startedAt).toISOString(),
  });
  ctx.progress.mark();
}
