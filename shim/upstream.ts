import type { ServerResponse } from "node:http";
import type { Dispatcher } from "undici";
import { GatewayAnswerHeaders } from "../protocol/headers.js";
import type { LedgerCall } from "../protocol/messages.js";
import { AnthropicStreamMeter, anthropicJsonResult } from "../providers/anthropic.js";
import { errorFromText, isOverload, isSpendLimit } from "../providers/errors.js";
import { ChatStreamMeter, openaiJsonResult, ResponsesStreamMeter } from "../providers/openai.js";
import { type SseEvent, SseParser } from "../providers/sse.js";
import { emptyTokenUsage, type MeterResult, type TokenUsage } from "../providers/types.js";
import type { ShimContext } from "./context.js";
import { type CallRequest, clientHeaders, estimateInputTokens } from "./request.js";

type Status = LedgerCall["status"];

/** One try at a call, as it lands in the ledger. */
export interface TryOutcome {
  status: Status;
  httpStatus: number | null;
  usage: TokenUsage;
  estimated: boolean;
  model: string | undefined;
  startedAt: number;
  latencyMs: number;
  ttfbMs: number | null;
  /** ms the gateway held the call for its pool's admission (its answer says so), 0 without a gateway that paces */
  gatewayWaitMs?: number;
}

export interface Try {
  outcome: TryOutcome;
  /** done: the client has its answer; retry: wait and try again; spend_limit: terminal */
  next: "done" | "retry" | "spend_limit";
  /** spend_limit: the provider's own account limit (not a cap of the run's): an infrastructure stop */
  providerSpendLimit?: boolean;
  headers?: Record<string, string | string[] | undefined>;
}

interface StreamMeter {
  onEvent(ev: SseEvent): boolean | undefined;
  result(): MeterResult;
}

const RETRY_STATUSES = new Set([429, 503, 529]);

function streamMeter(call: CallRequest): StreamMeter {
  if (call.route.endpoint === "messages") return new AnthropicStreamMeter() as StreamMeter;
  if (call.route.endpoint === "responses") return new ResponsesStreamMeter() as StreamMeter;
  return new ChatStreamMeter(call.hideUsage);
}

function jsonResult(call: CallRequest, text: string): MeterResult {
  if (call.route.endpoint === "messages") return anthropicJsonResult(text);
  return openaiJsonResult(text, call.route.endpoint === "responses" ? "responses" : "chat");
}

function waitOf(v: string | string[] | undefined): number {
  const n = Number(Array.isArray(v) ? v[0] : v);
  return Number.isFinite(n) && n > 0 ? Math.round(n) : 0;
}

/** An error event that opens a stream, before any work, is an overload worth retrying (if it says so). */
function isOverloadFirst(ev: SseEvent): boolean {
  if (ev.event !== "error" && !ev.data.startsWith('{"error"') && !ev.data.includes('"type":"error"'))
    return false;
  const e = errorFromText(ev.data);
  return isOverload(e);
}

function openedWithError(ev: SseEvent | undefined): boolean {
  return ev !== undefined && (ev.event === "error" || ev.data.startsWith('{"error"'));
}

/**
 * One upstream exchange, driven by undici's dispatch callbacks (no stream objects on the hot path). JSON bodies are
 * buffered and passed on whole; SSE bytes are passed on as they arrive, holding back only the first event so an
 * overload there can still be retried. Client writes in one tick are corked into one syscall.
 */
export class UpstreamTry implements Dispatcher.DispatchHandler {
  private controller: Dispatcher.DispatchController | undefined;
  private readonly t0 = performance.now();
  private readonly startedAt = Date.now();
  private status = 0;
  private headers: Record<string, string | string[] | undefined> = {};
  private mode: "none" | "buffer" | "stream" = "none";
  private chunks: Buffer[] = [];
  private ttfbMs: number | null = null;
  private meter: StreamMeter | undefined;
  private parser: SseParser | undefined;
  private first: SseEvent | undefined;
  private decided = false;
  private held: Array<string | Buffer> = [];
  private corked = false;
  private settled = false;
  private readonly hide: boolean;
  readonly result: Promise<Try>;
  private resolve!: (t: Try) => void;

  constructor(
    private readonly ctx: ShimContext,
    private readonly call: CallRequest,
    private readonly res: ServerResponse,
    private readonly sentBytes: number,
  ) {
    this.hide = call.hideUsage;
    this.result = new Promise((r) => {
      this.resolve = r;
    });
  }

  /** The client went away: stop reading upstream (the try lands as cut). */
  abort(): void {
    this.controller?.abort(new Error("client closed"));
  }

  private outcome(o: Partial<TryOutcome> & { status: Status }): TryOutcome {
    return {
      httpStatus: this.status || null,
      usage: emptyTokenUsage(),
      estimated: false,
      model: undefined,
      startedAt: this.startedAt,
      latencyMs: Math.round(performance.now() - this.t0),
      ttfbMs: this.ttfbMs,
      gatewayWaitMs: waitOf(this.headers[GatewayAnswerHeaders.pacerWaitMs]),
      ...o,
    };
  }

  private finish(t: Try): void {
    if (this.settled) return;
    this.settled = true;
    this.resolve(t);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.res.destroyed) controller.abort(new Error("client closed"));
  }

  onResponseStart(
    _c: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    this.status = statusCode;
    this.headers = headers;
    this.ttfbMs = Math.round(performance.now() - this.t0);
    this.ctx.pacer.observe({ pool: this.ctx.pool, status: statusCode, headers: flat(headers) });
    const ctype = headers["content-type"];
    const sse = statusCode === 200 && typeof ctype === "string" && ctype.includes("text/event-stream");
    if (!sse || RETRY_STATUSES.has(statusCode)) {
      this.mode = "buffer";
      return;
    }
    this.mode = "stream";
    this.meter = streamMeter(this.call);
    this.parser = new SseParser((ev) => this.onEvent(ev));
  }

  private onEvent(ev: SseEvent): void {
    this.first ??= ev;
    const show = this.meter!.onEvent(ev) !== false;
    if (!this.hide || !show) return;
    if (this.decided) this.write(ev.raw);
    else this.held.push(ev.raw);
  }

  private write(data: string | Buffer): void {
    const res = this.res;
    if (res.destroyed) return;
    if (!this.corked) {
      this.corked = true;
      res.cork();
      process.nextTick(() => {
        this.corked = false;
        res.uncork();
      });
    }
    res.write(data);
  }

  /** Send the response head and whatever was held back. */
  private open(): void {
    this.decided = true;
    if (this.res.destroyed) return;
    this.res.writeHead(200, clientHeaders(this.headers));
    for (const h of this.held) this.write(h);
    this.held = [];
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.mode === "buffer") {
      this.chunks.push(chunk);
      return;
    }
    if (this.decided) {
      if (!this.hide) this.write(chunk);
      this.parser!.push(chunk);
      return;
    }
    if (!this.hide) this.held.push(chunk);
    this.parser!.push(chunk);
    if (this.first === undefined) return;
    if (isOverloadFirst(this.first)) {
      // Settle first: the abort calls onResponseError, which must not treat this as a cut.
      this.finish({ outcome: this.outcome({ status: "overloaded" }), next: "retry", headers: this.headers });
      controller.abort(new Error("overloaded"));
      return;
    }
    this.open();
  }

  onResponseEnd(): void {
    if (this.mode === "buffer") {
      this.endBuffered();
      return;
    }
    if (!this.decided) {
      if (this.first && isOverloadFirst(this.first)) {
        this.finish({
          outcome: this.outcome({ status: "overloaded" }),
          next: "retry",
          headers: this.headers,
        });
        return;
      }
      this.open();
    }
    if (this.hide && this.parser!.pending) this.write(this.parser!.pending);
    if (!this.res.destroyed) this.res.end();
    this.endStream(false);
  }

  onResponseError(_c: Dispatcher.DispatchController, err: Error): void {
    if (this.settled) return;
    if (this.mode === "none") {
      // No response at all (connection refused / reset before the head): nothing was spent.
      const clientGone = this.res.destroyed;
      if (!clientGone) this.ctx.log.warn({ err: err.message }, "upstream request failed");
      this.finish({ outcome: this.outcome({ status: "error" }), next: clientGone ? "done" : "retry" });
      return;
    }
    if (this.mode === "buffer") {
      this.finish({ outcome: this.outcome({ status: "cut", estimated: true }), next: "done" });
      if (!this.res.headersSent) this.res.destroy();
      return;
    }
    // A stream cut midway (by the upstream or because the client left): the client sees a cut too.
    if (!this.decided) this.open();
    this.res.destroy();
    this.endStream(true);
  }

  private endBuffered(): void {
    const buf = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    this.chunks = [];
    const status = this.status;
    if (RETRY_STATUSES.has(status)) {
      const err = errorFromText(buf.toString("utf8"));
      const o = this.outcome({ status: status === 429 ? "rate_limited" : "overloaded" });
      if (isSpendLimit(err))
        this.finish({ outcome: { ...o, status: "error" }, next: "spend_limit", providerSpendLimit: true });
      else this.finish({ outcome: o, next: "retry", headers: this.headers });
      return;
    }
    // 402 is a cap (the gateway's run or attempt cap, a provider's billing limit): the session ends as a cap, the
    // client is answered by the caller with the attempt's budget error.
    if (status === 402) {
      this.finish({ outcome: this.outcome({ status: "error" }), next: "spend_limit" });
      return;
    }
    if (!this.res.destroyed) {
      this.res.writeHead(status, { ...clientHeaders(this.headers), "content-length": buf.length });
      this.res.end(buf);
    }
    if (status !== 200) {
      this.finish({ outcome: this.outcome({ status: "error" }), next: "done" });
      return;
    }
    const m = jsonResult(this.call, buf.toString("utf8"));
    this.finish({
      outcome: this.outcome({ status: m.error ? "error" : "ok", usage: m.usage, model: m.model }),
      next: "done",
    });
  }

  private endStream(cut: boolean): void {
    const m = this.meter!.result();
    const usage = { ...m.usage };
    const estimated = !m.reported;
    // Nothing reported the input: a stream that began (or was cut) is charged the request's estimate; one that
    // opened with an error was refused before any work.
    const began = this.first !== undefined && !openedWithError(this.first);
    if (estimated && usage.inputTokens === 0 && (began || cut))
      usage.inputTokens = estimateInputTokens(this.sentBytes);
    const status: Status = cut ? "cut" : m.error ? "error" : m.complete ? "ok" : "cut";
    this.finish({ outcome: this.outcome({ status, usage, estimated, model: m.model }), next: "done" });
  }
}

function flat(h: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k in h) {
    const v = h[k];
    if (v !== undefined) out[k] = Array.isArray(v) ? v.join(", ") : v;
  }
  return out;
}
