import { createHash, randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { hostname } from "node:os";
import { Agent, request } from "undici";
import { type Logger, silentLogger } from "../lib/log.js";
import { countModelCall, serveMetricsRequest } from "../lib/metrics.js";
import type { ModelCallTracer } from "../lib/otel.js";
import { type RunConfig, RunConfigSchema } from "../protocol/config.js";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import { AttributionHeaders, GatewayAnswerHeaders } from "../protocol/headers.js";
import { nanoToUsd, usdToNano } from "../protocol/money.js";
import type { Admission, Pacer } from "../protocol/pacer.js";
import { AnthropicStreamMeter, anthropicJsonResult } from "../providers/anthropic.js";
import { anthropicErrorBody, openaiErrorBody, shimError } from "../providers/errors.js";
import { type JsonMembers, readMembers, withMembers } from "../providers/json-members.js";
import { ChatStreamMeter, openaiJsonResult, ResponsesStreamMeter } from "../providers/openai.js";
import { type CacheWrites, type PriceTable, unknownPrice } from "../providers/pricing.js";
import { routeOf } from "../providers/routes.js";
import { runPriceTable } from "../providers/run-prices.js";
import { SseParser } from "../providers/sse.js";
import {
  approxTokens,
  type Endpoint,
  isRecord,
  type MeterResult,
  OUTPUT_CAP_FIELDS,
  type OutputCapField,
  type Provider,
} from "../providers/types.js";
import type { Db } from "../store/db.js";
import { keyInfo } from "../store/keys.js";
import { getRunMetadata } from "../store/results.js";
import {
  heartbeatReplica,
  REPLICA_HEARTBEAT_MS,
  reserveSpend,
  type SpendStatus,
  settleSpend,
  stopReplica,
} from "../store/spend.js";
import { trueUpRuns } from "./true-up.js";

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
  /** the provider's usage report for this key: calls whose answer reached nobody are trued up to it */
  usageReport?: { adminKey: string; apiKeyId?: string; lagMs: number };
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
  /**
   * Paces every forwarded call: admission from the call's pool before it is forwarded (the fleet pacer, shared by
   * every replica, in `up` and the deployed gateway), rate-limit headers observed, the estimate settled to the
   * usage. Without one, calls are only metered.
   */
  pacer?: Pacer;
  prices?: PriceTable;
  port?: number;
  host?: string;
  log?: Logger;
  maxBodyBytes?: number;
  /** OpenTelemetry export of each forwarded call (GenAI semantic conventions), when configured */
  tracer?: ModelCallTracer;
  /**
   * How often finished runs' calls whose answer reached nobody are trued up to their upstream's usage report
   * (gateway/true-up.ts; default 30 s, 0 = never).
   */
  trueUpEveryMs?: number;
}

export interface Gateway {
  url: string;
  port: number;
  /** Stop accepting, let calls in flight finish (drain). `{ abort: true }`: cut everything now, like a crash. */
  close(opts?: { abort?: boolean }): Promise<void>;
}

/** Headers a caller (the shim) may send to attribute a call; never forwarded upstream. */
export const GatewayHeaders = AttributionHeaders;

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
  GatewayHeaders.call,
  GatewayHeaders.attempt,
]);

export async function startGateway(opts: GatewayOptions): Promise<Gateway> {
  const log = opts.log ?? silentLogger();
  const agent = new Agent({ keepAliveTimeout: 30_000, connections: 256 });
  const inflight = new Set<AbortController>();
  // This replica's name on its spend-log rows; while it heartbeats, nobody else settles its pending ones.
  const replicaId = randomUUID();
  const beat = () =>
    heartbeatReplica(opts.db, replicaId, hostname()).catch((err: unknown) =>
      log.warn({ err: String(err) }, "gateway: replica heartbeat failed"),
    );
  await beat();
  const heartbeat = setInterval(() => void beat(), REPLICA_HEARTBEAT_MS);
  heartbeat.unref();
  // A run's cap and prices come from its config in run_metadata, cached briefly (a resubmission may change them).
  const runCache = new Map<string, { atMs: number; info: RunInfo }>();
  const runInfo = async (run: string): Promise<RunInfo> => {
    const hit = runCache.get(run);
    if (hit && Date.now() - hit.atMs < (opts.capCacheMs ?? 5000)) return hit.info;
    const config = await runConfigOf(opts.db, run);
    const cap = opts.runCapNanoUsd ? await opts.runCapNanoUsd(run) : config?.capNanoUsd;
    const prices = opts.prices ?? runPriceTable(config?.models ?? []).prices;
    const info = { cap, prices };
    if (runCache.size > 1024) runCache.clear();
    runCache.set(run, { atMs: Date.now(), info });
    return info;
  };
  // Own keys only: the alias is whatever model name the caller sent (`constructor` included).
  const aliasFor = async (alias: string): Promise<AliasDef | undefined> =>
    (opts.aliases && Object.hasOwn(opts.aliases, alias) ? opts.aliases[alias] : undefined) ??
    (opts.resolveAlias ? await opts.resolveAlias(alias) : undefined);

  // Settlements that failed (PostgreSQL away): tried again every few seconds, oldest first, so a call this replica
  // metered never stays pending (held at its reservation, blocking its run's true-up) once the database is back.
  const unsettled: Array<() => Promise<void>> = [];
  let retrying = false;
  const retrySettles = async (): Promise<void> => {
    if (retrying) return;
    retrying = true;
    try {
      while (unsettled.length > 0) {
        await unsettled[0]!();
        unsettled.shift();
      }
    } catch {
      // still away: next tick
    } finally {
      retrying = false;
    }
  };
  const settle = async (...args: Parameters<typeof settleSpend>): Promise<void> => {
    try {
      await settleSpend(...args);
    } catch (err) {
      if (unsettled.length < 100_000) unsettled.push(() => settleSpend(...args));
      throw err;
    }
  };
  const settleRetry = setInterval(() => void retrySettles(), 5_000);
  settleRetry.unref();

  // Calls whose answer reached nobody, trued up to the provider's own usage record once their run is over.
  const trueUpMs = opts.trueUpEveryMs ?? 30_000;
  let truing: Promise<unknown> = Promise.resolve();
  let trueUpBusy = false;
  const trueUpLater = new Map<string, number>();
  const trueUp =
    trueUpMs > 0
      ? setInterval(() => {
          if (trueUpBusy) return;
          trueUpBusy = true;
          truing = trueUpRuns(
            {
              db: opts.db,
              log,
              sourceOf: async (alias) => {
                const def = await aliasFor(alias).catch(() => undefined);
                if (!def) return undefined;
                const u = def.upstream;
                const key = `${u.provider} ${u.baseUrl} ${createHash("sha256").update(u.apiKey).digest("hex")}`;
                return {
                  upstreamKey: key,
                  ...(u.usageReport
                    ? { report: { provider: u.provider, baseUrl: u.baseUrl, ...u.usageReport } }
                    : {}),
                };
              },
              pricesOf: async (run) => (await runInfo(run)).prices,
            },
            trueUpLater,
          )
            .then((done) => {
              for (const [run, outcomes] of done)
                for (const o of outcomes)
                  if (o.kind === "trued")
                    log.info({ run, calls: o.calls }, "gateway: trued calls up to the usage report");
                  // A configured report that cannot be used says why; a run with none is nothing to report.
                  else if (o.kind === "skipped" && !o.why.includes("usage_report configured"))
                    log.warn({ run, why: o.why }, "gateway: true-up skipped; the reservations stand");
                  else log.debug({ run, why: o.why }, `gateway: true-up ${o.kind}`);
            })
            .catch((err: unknown) => log.warn({ err: String(err) }, "gateway: true-up failed"))
            .finally(() => {
              trueUpBusy = false;
            });
        }, trueUpMs)
      : undefined;
  trueUp?.unref();

  // Calls being handled, including their spend-log write after the answer: close() waits for these.
  const handlers = new Set<Promise<void>>();
  const server = createServer((req, res) => {
    // Prometheus scrapes this process's registry here (in `evalfleet up`, every part of the plane's).
    if (serveMetricsRequest(req, res)) return;
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
    // Watched from the start: a caller that leaves before its call is forwarded must not have it forwarded. Once
    // forwarded, the call is read to its end all the same (its answer discarded): the provider bills it whether or
    // not its caller stayed (a task killed mid-call), so the gateway meters what was billed instead of guessing.
    const ac = new AbortController();
    const client = { gone: false };
    const onClientGone = () => {
      if (res.writableFinished) return;
      client.gone = true;
      if (!call.forwarded) ac.abort();
    };
    res.once("close", onClientGone);
    const path = (req.url ?? "/").split("?")[0] ?? "/";
    const route = routeOf(path);
    const provider = route?.provider ?? providerOf(req);
    const key = await keyInfo(opts.db, presentedKey(req));
    if (!key) return send(res, 401, unauthorized(provider));
    const run = key.run;
    if (!route || req.method !== "POST") return send(res, 404, notFound(provider, path));
    const raw = await readBody(req, opts.maxBodyBytes ?? 32 * 1024 * 1024);
    if (raw === undefined) return send(res, 413, badRequest(provider, "request body too large"));
    // A few top-level members are all the gateway reads: the conversation is neither parsed nor re-serialised.
    const body = readMembers(raw, GATEWAY_READS);
    if (typeof body === "string") return send(res, 400, badRequest(provider, body));
    const modelMember = body.members.get("model")?.value;
    const alias = typeof modelMember === "string" ? modelMember : "";
    const def = alias ? await aliasFor(alias) : undefined;
    // An attempt's key may call only its cell's model(s); an alias of another run is refused alike.
    if (!def || (def.runs && !def.runs.includes(run)) || (key.models && !key.models.includes(alias)))
      return send(res, 403, forbidden(provider, alias));
    if (def.upstream.provider !== provider)
      return send(
        res,
        400,
        badRequest(provider, `model ${alias} is served over the ${def.upstream.provider} API`),
      );
    const model = def.model ?? alias;
    const pool = def.pool ?? alias;
    const { cap, prices } = await runInfo(run);
    // The run's own price for the id it sends, else the data's for the upstream model; neither: never forwarded.
    const priceAs = prices.knows(alias) ? alias : model;
    if (!prices.knows(priceAs)) return send(res, 400, badRequest(provider, unknownPrice(alias).message));
    const metered = route.endpoint !== "count_tokens";
    const unpriceable = metered ? unpriceableFeature(route.endpoint, body) : null;
    if (unpriceable) return send(res, 400, badRequest(provider, unpriceable));
    const sets = new Map<string, unknown>();
    if (model !== alias) sets.set("model", model);

    const requestId = randomUUID();
    const startedAtMs = Date.now();
    // Pacing first: a call queued for its pool's rate holds no budget while it waits.
    let admission: Admission | null = null;
    if (metered && opts.pacer) {
      const granted = await admitCall(opts.pacer, pool, raw, body, ac.signal, log);
      if (granted === "gone") return; // the caller left while queued: nothing forwarded, nothing reserved
      admission = granted;
      if (admission) res.setHeader(GatewayAnswerHeaders.pacerWaitMs, String(admission.waitedMs));
    }
    let reserveNanoUsd = 0;
    if (metered) {
      const worst = worstCase(prices, priceAs, route.endpoint, raw, body);
      const reserved = await reserveSpend(
        opts.db,
        {
          requestId,
          run,
          // An attempt's key says whose call it is; the shim's header only for a run-wide key.
          cellId: key.cellId ?? header(req, GatewayHeaders.cell),
          traceId: header(req, GatewayHeaders.trace),
          alias,
          model,
          callId: header(req, GatewayHeaders.call),
          keyHash: key.keyHash,
          attempt: key.attempt ?? attemptHeader(req),
          exempt: key.exempt,
          replicaId,
        },
        {
          worstNanoUsd: worst.nanoUsd,
          fit: (left) => {
            const n = prices.affordableWorstOutput(
              priceAs,
              worst.inputTokens,
              worst.cacheWrites,
              BigInt(left),
            );
            if (n < 1) return null;
            clampOutput(sets, route.endpoint, body, n);
            return Number(
              prices.worstCaseNanoUsd(priceAs, {
                inputTokens: worst.inputTokens,
                outputTokens: n,
                cacheWrites: worst.cacheWrites,
              }),
            );
          },
        },
        { runCapNanoUsd: cap, keyCapNanoUsd: key.capNanoUsd },
      );
      if (!reserved.ok) admission?.refund();
      if (!reserved.ok && reserved.wait) {
        // Only the reservations of calls in flight are in the way: an overload the caller retries.
        const e = shimError(
          provider,
          "overloaded",
          `evalfleet gateway: calls in flight hold this key's or run's remaining budget; retry shortly`,
        );
        res.setHeader("retry-after", "1");
        return send(res, e.status, e.body);
      }
      if (!reserved.ok) {
        const which = reserved.cap === "run" ? "run spend cap" : `${key.kind} spend cap`;
        const e = shimError(
          provider,
          "budget_exceeded",
          `${which} of $${nanoToUsd(reserved.capNanoUsd)} reached: $${nanoToUsd(reserved.spentNanoUsd)} spent, this call may cost up to $${nanoToUsd(worst.nanoUsd)}`,
        );
        return send(res, e.status, e.body);
      }
      reserveNanoUsd = reserved.reserveNanoUsd;
    }
    const outBody = sets.size === 0 ? raw : withMembers(body, sets);
    if (ac.signal.aborted) {
      // Gone before the forward (e.g. while its reservation was written): nothing reaches the provider, nothing can
      // be billed.
      admission?.refund();
      if (metered) await settle(opts.db, requestId, "client_closed", null, 0);
      return;
    }
    inflight.add(ac);
    call.forwarded = true;

    // /metrics counts each call once, as its spend is logged: the provider's answer and what it cost.
    let upstreamStatus: number | null = null;
    const count = (
      st: SpendStatus,
      usage: MeterResult["usage"] | null,
      costNanoUsd: number,
      r?: MeterResult,
    ) => {
      countModelCall("gateway", {
        model,
        status: st,
        httpStatus: upstreamStatus,
        costNanoUsd,
        tokens: usage,
      });
      opts.tracer?.record({
        provider: def.upstream.provider,
        requestModel: model,
        responseModel: r?.model ?? null,
        startedAtMs,
        endedAtMs: Date.now(),
        status: st,
        httpStatus: upstreamStatus,
        // the normalised total: cache reads and writes included, as the GenAI conventions count input
        inputTokens: usage?.inputTokens ?? null,
        outputTokens: usage?.outputTokens ?? null,
        cacheReadTokens: usage?.cacheReadTokens ?? null,
        cacheWriteTokens: usage?.cacheWriteTokens ?? null,
        costNanoUsd,
        run,
        cellId: key.cellId,
        attempt: key.attempt,
      });
    };
    const logCall = async (st: SpendStatus, r: MeterResult | undefined): Promise<void> => {
      if (st === "lost" || st === "client_closed") {
        // The provider may have generated (and billed) more than reached us before the call was cut on our side:
        // the worst-case reservation stays as the cost, with what was metered kept for the record (and the pool
        // keeps the call's admission estimate: its real usage is unknown).
        count(st, r?.usage ?? null, reserveNanoUsd, r);
        await settle(opts.db, requestId, st, r?.usage ?? null, reserveNanoUsd, r?.model, prices.version);
        return;
      }
      const usage = r?.usage ?? null;
      // An error before any output is not billed; anything the provider did send is.
      const billable =
        usage !== null && (st !== "error" || (r?.sawContent ?? false) || usage.outputTokens > 0);
      const costNanoUsd = billable ? prices.cost(priceAs, usage, startedAtMs).costNanoUsd : 0;
      if (billable)
        admission?.settle({
          inputTokens: usage.inputTokens - usage.cacheReadTokens,
          outputTokens: usage.outputTokens,
          cacheReadTokens: usage.cacheReadTokens,
          cacheWriteTokens: usage.cacheWriteTokens,
        });
      else admission?.refund();
      count(st, billable ? usage : null, costNanoUsd, r);
      await settle(opts.db, requestId, st, billable ? usage : null, costNanoUsd, r?.model, prices.version);
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
      upstreamStatus = up.statusCode;
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
        if (!client.gone && !res.write(buf)) await drained(res);
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
          log.error(
            { err, requestId },
            "gateway: spend log write failed; tried again every 5 s (the reservation stands meanwhile)",
          ),
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
      if (client.gone) res.destroy();
      else if (!res.headersSent) {
        const e = shimError(provider, "upstream", "upstream unavailable");
        send(res, e.status, e.body);
      } else res.destroy();
    } finally {
      inflight.delete(ac);
      res.off("close", onClientGone);
    }
    if (metered && !logged) await logCall(status, result);
  }

  await new Promise<void>((resolve, reject) => {
    const onError = (err: NodeJS.ErrnoException) =>
      reject(
        err.code === "EADDRINUSE"
          ? new EvalfleetError(
              ErrorCode.Conflict,
              `the gateway cannot listen on ${opts.host ?? "127.0.0.1"}:${opts.port}: the port is in use (another ` +
                "`evalfleet up` or gateway?). Stop that process, or choose another port (--gateway-port / --port) " +
                "and point submitters at it with EVALFLEET_GATEWAY_URL.",
            )
          : err,
      );
    server.once("error", onError);
    server.listen(opts.port ?? 0, opts.host ?? "127.0.0.1", () => {
      server.off("error", onError);
      resolve();
    });
  });
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
      clearInterval(heartbeat);
      clearInterval(trueUp);
      clearInterval(settleRetry);
      await truing;
      await retrySettles();
      // A drained replica has no call in flight; after an abort (a crash, in tests) it is left to go silent.
      if (!closeOpts.abort)
        await stopReplica(opts.db, replicaId).catch((err: unknown) =>
          log.warn({ err: String(err) }, "gateway: could not record the replica's stop"),
        );
      await agent.close().catch(() => undefined);
    },
  };
}

interface RunInfo {
  cap: number | undefined;
  prices: PriceTable;
}

/**
 * What the gateway needs of the run's stored config: its cap (read even from a config this build's schema no longer
 * accepts, so a cap is never lost) and its models' prices. Undefined for a run known only by its key.
 */
async function runConfigOf(
  db: Db,
  run: string,
): Promise<{ capNanoUsd: number | undefined; models: RunConfig["models"] } | undefined> {
  const meta = await getRunMetadata(db, run);
  if (!meta) return undefined;
  const raw = JSON.parse(meta.configJson) as { budget_usd?: unknown };
  const parsed = RunConfigSchema.safeParse(raw);
  return {
    capNanoUsd: typeof raw.budget_usd === "number" ? Number(usdToNano(raw.budget_usd)) : undefined,
    models: parsed.success ? parsed.data.models : [],
  };
}

/** The members the gateway reads: the model, the output cap, and what a request may ask for that has no price. */
const GATEWAY_READS = new Set<string>([
  "model",
  "thinking",
  "n",
  "background",
  "service_tier",
  "tools",
  "mcp_servers",
  "web_search_options",
  ...OUTPUT_CAP_FIELDS,
]);

/** Output tokens a model can be billed for when neither the request nor the data gives a limit. */
const DEFAULT_OUTPUT_LIMIT = 200_000;
/**
 * Input a provider bills beyond the request's own bytes: the system prompt it adds when tools are offered (Anthropic:
 * a few hundred tokens, more for computer use).
 */
const PROVIDER_INPUT_OVERHEAD = 2_048;

/** Output tokens a call is admitted for when it sets no cap (its settle corrects the pool to what it used). */
const ADMIT_OUTPUT_WITHOUT_CAP = 4_096;

/**
 * A call's admission from its pool, or null when the pacer could not admit it (no pool owner within its bound, as
 * when NATS is down): the call is then forwarded unpaced, since the provider's own limits still hold (a 429 the shim
 * retries) and no money depends on the pacer. "gone": the caller left while queued.
 */
async function admitCall(
  pacer: Pacer,
  pool: string,
  raw: Buffer,
  body: JsonMembers,
  signal: AbortSignal,
  log: Logger,
): Promise<Admission | null | "gone"> {
  try {
    return await pacer.admit(
      {
        pool,
        inputTokens: approxTokens(raw.length),
        outputTokens: outputCap(body)?.tokens ?? ADMIT_OUTPUT_WITHOUT_CAP,
      },
      signal,
    );
  } catch (err) {
    if (signal.aborted) return "gone";
    log.warn({ pool, err: (err as Error).message }, "gateway: pacer admission failed; forwarding unpaced");
    return null;
  }
}

function outputCap(body: JsonMembers): { field: OutputCapField; tokens: number } | undefined {
  for (const field of OUTPUT_CAP_FIELDS) {
    const v = body.members.get(field)?.value;
    if (typeof v === "number" && Number.isFinite(v) && v > 0) return { field, tokens: Math.floor(v) };
  }
  return undefined;
}

/**
 * The most a call can cost, whatever the shim in front claims: every byte of the body one input token (a token is
 * at least a byte) plus what the provider adds, at most the model's context window; the request's own output cap, else the model's limit (its
 * context window); input at cache-write rates when the body asks for cache writes (`cache_control`, `"ttl":"1h"`).
 */
function worstCase(
  prices: PriceTable,
  model: string,
  endpoint: Endpoint,
  raw: Buffer,
  body: JsonMembers,
): { nanoUsd: number; inputTokens: number; cacheWrites: CacheWrites } {
  const window = prices.lookup(model)?.contextWindow;
  const bound = raw.length + PROVIDER_INPUT_OVERHEAD;
  const inputTokens = window === undefined ? bound : Math.min(bound, window);
  const limit = window ?? DEFAULT_OUTPUT_LIMIT;
  const outputTokens = Math.min(outputCap(body)?.tokens ?? limit, limit);
  const cacheWrites: CacheWrites =
    endpoint !== "messages" || raw.indexOf('"cache_control"') < 0
      ? "none"
      : raw.indexOf('"1h"') >= 0
        ? "1h"
        : "5m";
  const nanoUsd = Number(prices.worstCaseNanoUsd(model, { inputTokens, outputTokens, cacheWrites }));
  return { nanoUsd, inputTokens, cacheWrites };
}

/** Lower the request's output cap to `n` (adding the field when absent), keeping an Anthropic thinking budget valid. */
function clampOutput(sets: Map<string, unknown>, endpoint: Endpoint, body: JsonMembers, n: number): void {
  const field: OutputCapField =
    outputCap(body)?.field ??
    (endpoint === "responses"
      ? "max_output_tokens"
      : endpoint === "chat_completions"
        ? "max_completion_tokens"
        : "max_tokens");
  sets.set(field, n);
  const thinking = body.members.get("thinking")?.value;
  if (isRecord(thinking) && typeof thinking.budget_tokens === "number" && thinking.budget_tokens >= n)
    sets.set("thinking", n > 1024 ? { ...thinking, budget_tokens: n - 1 } : { type: "disabled" });
}

/** Anthropic tools the provider runs itself and bills per use, not per token. */
const ANTHROPIC_SERVER_TOOL = /^(web_search|web_fetch|code_execution)_/;
/** OpenAI Responses tools the provider runs itself and bills per use or per container. */
const OPENAI_SERVER_TOOLS = new Set([
  "web_search",
  "web_search_preview",
  "web_search_preview_2025_03_11",
  "file_search",
  "code_interpreter",
  "image_generation",
  "mcp",
]);

/**
 * Why a request cannot be priced before it is sent, or null: several completions (`n` > 1), a background response,
 * a server-side tool or MCP connector (billed per use), a priority service tier (billed above list). The gateway
 * refuses such a call: its worst case is unknown, so no cap could hold.
 */
export function unpriceableFeature(endpoint: Endpoint, body: JsonMembers): string | null {
  const v = (k: string) => body.members.get(k)?.value;
  const refuse = (what: string, fix: string) =>
    `evalfleet gateway: ${what} cannot be priced before the call, so no spend cap could hold; ${fix}`;
  const n = v("n");
  if (typeof n === "number" && n > 1) return refuse(`n = ${n} (several completions)`, "ask for one (n: 1)");
  if (v("background") === true) return refuse("a background response", "call without background: true");
  const tier = v("service_tier");
  if (tier === "priority" || tier === "scale")
    return refuse(`service_tier ${JSON.stringify(tier)}`, 'use the default tier ("auto" or "default")');
  if (v("web_search_options") !== undefined) return refuse("web search", "remove web_search_options");
  const mcp = v("mcp_servers");
  if (Array.isArray(mcp) && mcp.length > 0)
    return refuse("a provider-side MCP connector", "remove mcp_servers");
  const tools = v("tools");
  if (Array.isArray(tools))
    for (const t of tools) {
      const type = isRecord(t) && typeof t.type === "string" ? t.type : "";
      const server =
        endpoint === "messages"
          ? ANTHROPIC_SERVER_TOOL.test(type)
          : endpoint === "responses" && OPENAI_SERVER_TOOLS.has(type);
      if (server)
        return refuse(
          `the server-side tool ${JSON.stringify(type)} (billed per use)`,
          "remove it from tools",
        );
    }
  return null;
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

function attemptHeader(req: IncomingMessage): number | null {
  const v = header(req, GatewayHeaders.attempt);
  return v !== null && /^\d{1,9}$/.test(v) ? Number(v) : null;
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
