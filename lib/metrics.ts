import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Counter, collectDefaultMetrics, Gauge, Registry } from "prom-client";

/*
 * Prometheus metrics (prom-client), one registry per process: the gateway serves it on its own port at /metrics,
 * an actor process on EVALFLEET_METRICS_PORT, and `evalfleet up` (every part in one process) on its gateway's.
 * Counters count what this process did; Prometheus sums replicas. Money is integer nano-USD, like everywhere.
 *
 * Where each is counted: model calls, tokens, cost and 429s at the gateway (`source="gateway"`, every call that
 * reached a provider) and again as the results-writer lands the ledger (`source="ledger"`, the truth about money,
 * with the pacer waits the shims measured); launches at the dispatcher, grades at the grader-supervisor, queue
 * depths from each actor's own JetStream consumer when scraped.
 */

export const registry = new Registry();
collectDefaultMetrics({ register: registry });

const counter = <L extends string>(name: string, help: string, labelNames: readonly L[]) =>
  new Counter<L>({ name, help, labelNames, registers: [registry] });

export const Metrics = {
  modelCalls: counter(
    "evalfleet_model_calls_total",
    "model calls, by where they were counted, model and outcome",
    ["source", "model", "status"],
  ),
  modelTokens: counter(
    "evalfleet_model_tokens_total",
    "model tokens by kind (input, output, cache_read, cache_write, reasoning)",
    ["source", "model", "kind"],
  ),
  modelCostNanoUsd: counter("evalfleet_model_cost_nano_usd_total", "model spend in nano-USD (1e-9 USD)", [
    "source",
    "model",
  ]),
  rateLimited: counter(
    "evalfleet_model_rate_limited_total",
    "provider 429 answers (gateway: each answer; ledger: calls that ended rate limited)",
    ["source", "model"],
  ),
  pacerWaitMs: counter(
    "evalfleet_pacer_wait_ms_total",
    "time calls waited for paced admission, from the ledger",
    ["pool"],
  ),
  pacerWaitedCalls: counter(
    "evalfleet_pacer_waited_calls_total",
    "calls that waited for paced admission at all",
    ["pool"],
  ),
  ledgerBatchesUncounted: counter(
    "evalfleet_ledger_batches_uncounted_total",
    "ledger batches only partly new (a redelivery mixed with new calls): left out of the ledger counters",
    [],
  ),
  launches: counter("evalfleet_launches_total", "attempts the dispatcher launched, by backend and outcome", [
    "backend",
    "outcome",
  ]),
  grades: counter("evalfleet_grades_total", "grades the grader-supervisor produced, by status", ["status"]),
  queueDepth: new Gauge<"stream" | "consumer" | "state">({
    name: "evalfleet_queue_messages",
    help: "messages waiting for this process's JetStream consumers (state: pending = not yet delivered, ack_pending = delivered, not yet acknowledged)",
    labelNames: ["stream", "consumer", "state"],
    registers: [registry],
    async collect() {
      this.reset();
      await Promise.all(
        [...queues.values()].map(async (q) => {
          const depth = await q.read().catch(() => null);
          if (!depth) return;
          this.set({ stream: q.stream, consumer: q.consumer, state: "pending" }, depth.pending);
          this.set({ stream: q.stream, consumer: q.consumer, state: "ack_pending" }, depth.ackPending);
        }),
      );
    },
  }),
};

const queues = new Map<string, { stream: string; consumer: string; read: () => Promise<QueueDepth> }>();

export interface QueueDepth {
  pending: number;
  ackPending: number;
}

/** Report a consumer's depth on every scrape until the returned function is called. */
export function watchQueue(stream: string, consumer: string, read: () => Promise<QueueDepth>): () => void {
  const key = `${stream}\u0000${consumer}`;
  queues.set(key, { stream, consumer, read });
  return () => {
    if (queues.get(key)?.read === read) queues.delete(key);
  };
}

/** Token counts of one call by kind, as the ledger and the meters name them. */
export interface CallTokens {
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  reasoningTokens: number;
}

/** Count one model call: its outcome, tokens, spend, and whether the provider answered 429. */
export function countModelCall(
  source: "gateway" | "ledger",
  c: {
    model: string;
    status: string;
    httpStatus: number | null;
    costNanoUsd: number;
    tokens: CallTokens | null;
  },
): void {
  Metrics.modelCalls.inc({ source, model: c.model, status: c.status });
  if (c.httpStatus === 429 || c.status === "rate_limited")
    Metrics.rateLimited.inc({ source, model: c.model });
  if (c.costNanoUsd > 0) Metrics.modelCostNanoUsd.inc({ source, model: c.model }, c.costNanoUsd);
  const t = c.tokens;
  if (!t) return;
  for (const [kind, n] of [
    ["input", t.inputTokens],
    ["output", t.outputTokens],
    ["cache_read", t.cacheReadTokens],
    ["cache_write", t.cacheWriteTokens],
    ["reasoning", t.reasoningTokens],
  ] as const)
    if (n > 0) Metrics.modelTokens.inc({ source, model: c.model, kind }, n);
}

/** Answer GET /metrics (true when the request was that). */
export function serveMetricsRequest(req: IncomingMessage, res: ServerResponse): boolean {
  if (req.method !== "GET" || (req.url ?? "").split("?")[0] !== "/metrics") return false;
  registry.metrics().then(
    (text) => {
      res.writeHead(200, { "content-type": registry.contentType, "cache-control": "no-store" });
      res.end(text);
    },
    (err: unknown) => {
      res.writeHead(500, { "content-type": "text/plain; charset=utf-8" });
      res.end(`metrics failed: ${err instanceof Error ? err.message : String(err)}\n`);
    },
  );
  return true;
}

/** A listener that serves only /metrics (an actor process's). */
export async function startMetricsServer(opts: { host: string; port: number }): Promise<{
  url: string;
  close(): Promise<void>;
}> {
  const server: Server = createServer((req, res) => {
    if (serveMetricsRequest(req, res)) return;
    res.writeHead(404, { "content-type": "text/plain; charset=utf-8" });
    res.end("only /metrics is served here\n");
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://${opts.host.includes(":") ? `[${opts.host}]` : opts.host}:${port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
