import { chmod } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import type { NatsConnection } from "@nats-io/transport-node";
import { Pool } from "undici";
import { type Logger, silentLogger } from "../lib/log.js";
import type { CostMode } from "../protocol/config.js";
import type { LedgerCall } from "../protocol/messages.js";
import { type Pacer, UnlimitedPacer } from "../protocol/pacer.js";
import { redactSecrets } from "../protocol/redact.js";
import { Subjects } from "../protocol/subjects.js";
import { shimError } from "../providers/errors.js";
import { PriceTable } from "../providers/pricing.js";
import { routeOf } from "../providers/routes.js";
import { handleModelCall } from "./call.js";
import type { RetryPolicy, ShimContext } from "./context.js";
import { clientHeaders, upstreamHeaders } from "./request.js";
import { LedgerSink, ProgressWriter, progressKey } from "./sink.js";
import { AttemptState, type CapEvent, type CapReason, type ShimTotals } from "./state.js";

export type { RetryPolicy } from "./context.js";
export { type CapEvent, type CapReason, emptyTotals, type InfraStop, type ShimTotals } from "./state.js";

export interface ShimOptions {
  /** the gateway (or any OpenAI/Anthropic-compatible base URL); request paths are appended to it */
  upstream: string;
  run: string;
  cell: string;
  attempt: number;
  /** the run's provider key; replaces whatever key the harness sends */
  providerKey: string;
  /** the attempt's budget in nano-USD (null / absent: uncapped) */
  budgetNanoUsd?: bigint | number | null;
  maxTurns?: number | null;
  port?: number;
  host?: string;
  /**
   * Listen on this unix socket instead of TCP (mode 0666: a harness container's user connects through a bind
   * mount of its folder); `port` is then 0 and `url` names no port the harness could use.
   */
  socketPath?: string;
  /** ledger rows and progress go here; without it they only reach `onLedgerRow` */
  nc?: NatsConnection;
  pacer?: Pacer;
  pool?: string;
  traceId?: string;
  costMode?: CostMode;
  prices?: PriceTable;
  /** alias → model the price table knows, for aliased model names */
  aliases?: Record<string, string>;
  retry?: Partial<RetryPolicy>;
  logger?: Logger;
  /** coalescing interval of progress KV writes */
  progressIntervalMs?: number;
  upstreamConnections?: number;
  defaultMaxOutputTokens?: number;
  /** every ledger row, as published (tests, the CLI) */
  onLedgerRow?: (row: LedgerCall) => void;
  /**
   * A file that keeps the ledger rows NATS has not acked when the shim stops; a shim started with the same file
   * publishes them again first (JetStream drops any that did land: same message id).
   */
  ledgerSpool?: string;
}

export interface ShimHandle {
  port: number;
  url: string;
  totals(): ShimTotals;
  /** stop taking calls, finish those in flight, flush the ledger and the progress key */
  drain(): Promise<void>;
  /**
   * Drain, then release the upstream connections. `withinMs`: done by then whatever NATS and the upstream do — calls
   * still in flight are cut, ledger rows not acked go to the spool file (`ledgerSpool`).
   */
  close(withinMs?: number): Promise<void>;
  /** called once when a cap is reached (the session should end); returns an unsubscribe function */
  onCapReached(cb: (ev: CapEvent) => void): () => void;
}

const DEFAULT_RETRY: RetryPolicy = {
  maxRetries: 8,
  baseDelayMs: 500,
  maxDelayMs: 30_000,
  maxRetryAfterMs: 120_000,
};

/**
 * The local proxy shim: the harness talks to it on 127.0.0.1 instead of the provider; every call is admitted,
 * budget-checked, forwarded with the run's key, metered, priced and written to the ledger, and a reached cap ends
 * the session through onCapReached and a core publish on the attempt's signal subject.
 */
export async function startShim(opts: ShimOptions): Promise<ShimHandle> {
  const log = opts.logger ?? silentLogger();
  const upstreamUrl = new URL(opts.upstream);
  const basePath = upstreamUrl.pathname.replace(/\/+$/, "");
  const upstream = new Pool(upstreamUrl.origin, {
    connections: opts.upstreamConnections ?? 256,
    keepAliveTimeout: 60_000,
    headersTimeout: 600_000,
    bodyTimeout: 600_000,
  });
  const budget =
    opts.budgetNanoUsd === undefined || opts.budgetNanoUsd === null ? null : BigInt(opts.budgetNanoUsd);
  const state = new AttemptState(budget, opts.maxTurns ?? null);
  const secrets = [opts.providerKey];
  const ledger = new LedgerSink(opts.nc, log, secrets, opts.onLedgerRow, opts.ledgerSpool);
  const restored = await ledger.restore();
  if (restored > 0)
    log.warn({ rows: restored, spool: opts.ledgerSpool }, "publishing ledger rows an earlier shim kept");
  const progress = new ProgressWriter(
    opts.nc,
    progressKey(opts.run, opts.cell),
    () => ({
      run: opts.run,
      cellId: opts.cell,
      attempt: opts.attempt,
      status: "running",
      usage: {
        inputTokens: state.totals.inputTokens,
        outputTokens: state.totals.outputTokens,
        cacheReadTokens: state.totals.cacheReadTokens,
        cacheWriteTokens: state.totals.cacheWriteTokens,
        reasoningTokens: state.totals.reasoningTokens,
        costNanoUsd: state.totals.costNanoUsd,
        calls: state.totals.calls,
      },
      turns: state.totals.turns,
      pacerWaitMs: state.totals.pacerWaitMs,
      ...(state.totals.capReason ? { detail: state.totals.capReason } : {}),
    }),
    opts.progressIntervalMs ?? 250,
    log,
  );
  await progress.open();

  const fireCap = (reason: CapReason): void => {
    if (state.totals.capReason) return;
    state.totals.capReason = reason;
    const ev: CapEvent = {
      reason,
      run: opts.run,
      cellId: opts.cell,
      attempt: opts.attempt,
      costNanoUsd: state.totals.costNanoUsd,
      budgetNanoUsd: budget === null ? null : Number(budget),
      turns: state.totals.turns,
      maxTurns: opts.maxTurns ?? null,
      at: new Date().toISOString(),
    };
    log.info({ reason, costNanoUsd: ev.costNanoUsd, turns: ev.turns }, "cap reached: ending the session");
    progress.mark();
    try {
      opts.nc?.publish(Subjects.attemptSignal(opts.run, opts.cell, opts.attempt), JSON.stringify(ev));
    } catch (err) {
      log.warn({ err: String(err) }, "cap signal publish failed");
    }
    state.events.emit("cap", ev);
  };

  const ctx: ShimContext = {
    run: opts.run,
    cell: opts.cell,
    attempt: opts.attempt,
    pool: opts.pool ?? "default",
    traceId: opts.traceId ?? "",
    costMode: opts.costMode ?? "platform",
    key: opts.providerKey,
    aliases: opts.aliases ?? {},
    upstream,
    basePath,
    prices: opts.prices ?? new PriceTable(),
    pacer: opts.pacer ?? new UnlimitedPacer(),
    state,
    ledger,
    progress,
    log,
    retry: { ...DEFAULT_RETRY, ...opts.retry },
    defaultMaxOutputTokens: opts.defaultMaxOutputTokens ?? 32_000,
    fireCap,
  };

  const inflight = new Set<Promise<void>>();
  const server: Server = createServer((req, res) => {
    const p = handle(ctx, req, res)
      .catch((err: unknown) => {
        log.error(
          { err: redactSecrets(err instanceof Error ? (err.stack ?? err.message) : String(err), secrets) },
          "shim call failed",
        );
        if (!res.headersSent) {
          const e = shimError(
            routeOf(pathOf(req))?.provider ?? "anthropic",
            "upstream",
            "evalfleet shim: internal error",
          );
          res.writeHead(e.status, { "content-type": "application/json" });
          res.end(e.body);
        } else res.destroy();
      })
      .finally(() => inflight.delete(p));
    inflight.add(p);
  });
  server.keepAliveTimeout = 65_000;
  server.requestTimeout = 0;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    if (opts.socketPath !== undefined) server.listen(opts.socketPath, () => resolve());
    else server.listen(opts.port ?? 0, opts.host ?? "127.0.0.1", () => resolve());
  });
  if (opts.socketPath !== undefined) await chmod(opts.socketPath, 0o666);
  const port = opts.socketPath !== undefined ? 0 : (server.address() as AddressInfo).port;

  let drained: Promise<void> | undefined;
  const drain = (): Promise<void> => {
    drained ??= (async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      });
      while (inflight.size > 0) await Promise.allSettled([...inflight]);
      await ledger.flush();
      await progress.flush();
    })();
    return drained;
  };

  return {
    port,
    url: opts.socketPath !== undefined ? `http+unix://${opts.socketPath}` : `http://127.0.0.1:${port}`,
    totals: () => ({ ...state.totals }),
    drain,
    async close(withinMs?: number) {
      const closing = drain();
      // Connections of a killed harness may never close by themselves.
      setTimeout(() => server.closeAllConnections(), Math.min(2_000, withinMs ?? 2_000)).unref();
      if (withinMs === undefined) {
        await closing;
        await ledger.close();
        await upstream.close();
        return;
      }
      // Bounded, whatever NATS or the upstream are doing: half the time for calls in flight, then those are cut (each
      // lands its row), then the ledger gets what is left and keeps what is not acked in its spool file.
      const until = Date.now() + withinMs;
      await Promise.race([closing, sleep(withinMs / 2, undefined, { ref: false })]);
      await upstream.destroy().catch(() => undefined);
      await Promise.race([closing, sleep(100, undefined, { ref: false })]);
      await ledger.close(Math.max(0, until - Date.now()));
    },
    onCapReached(cb) {
      state.events.on("cap", cb);
      return () => state.events.off("cap", cb);
    },
  };
}

function pathOf(req: IncomingMessage): string {
  const url = req.url ?? "/";
  const q = url.indexOf("?");
  return q < 0 ? url : url.slice(0, q);
}

/** The whole request body (events, not async iteration: cheaper on the hot path). */
function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.once("end", () => resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)));
    req.once("error", reject);
  });
}

async function handle(ctx: ShimContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const route = routeOf(pathOf(req));
  if (route && req.method === "POST" && route.endpoint !== "count_tokens") {
    const raw = await readBody(req);
    return await handleModelCall(ctx, req, res, route, raw);
  }
  return await passThrough(ctx, req, res, route?.provider);
}

/** Any other path (count_tokens, models, HEAD probes): forwarded with the run's key, unmetered. */
async function passThrough(
  ctx: ShimContext,
  req: IncomingMessage,
  res: ServerResponse,
  provider: "anthropic" | "openai" | undefined,
): Promise<void> {
  const method = (req.method ?? "GET") as "GET";
  const hasBody = method !== "GET" && method !== "HEAD";
  const body = hasBody ? await readBody(req) : null;
  const up = await ctx.upstream.request({
    path: ctx.basePath + (req.url ?? "/"),
    method,
    headers: upstreamHeaders(req.headers, provider, ctx.key, {
      cell: ctx.cell,
      trace: ctx.traceId,
      attempt: ctx.attempt,
    }),
    body,
  });
  res.writeHead(up.statusCode, clientHeaders(up.headers));
  for await (const chunk of up.body as AsyncIterable<Buffer>) res.write(chunk);
  res.end();
}
