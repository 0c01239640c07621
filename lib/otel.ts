import { SpanKind, SpanStatusCode } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BasicTracerProvider, BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";

/*
 * Optional OpenTelemetry export of model calls (EVALFLEET_OTEL_ENDPOINT): one CLIENT span per call the gateway
 * forwards, named and attributed by the GenAI semantic conventions (opentelemetry.io/docs/specs/semconv/gen-ai,
 * status Development): `chat <model>`, gen_ai.operation.name, gen_ai.provider.name, gen_ai.request.model,
 * gen_ai.response.model, gen_ai.usage.input_tokens / output_tokens, error.type; evalfleet's own facts (run, cell,
 * attempt, cost in nano-USD, the spend-log status) under evalfleet.*. Sent over OTLP/HTTP (JSON) in batches.
 */

/** One model call as the gateway saw it. */
export interface ModelCallRecord {
  provider: "anthropic" | "openai";
  /** the model the caller asked for (the gateway alias resolves to it) */
  requestModel: string;
  responseModel: string | null;
  startedAtMs: number;
  endedAtMs: number;
  /** the gateway's spend-log status: ok, error, cut, lost, client_closed */
  status: string;
  httpStatus: number | null;
  /** every input token, cache reads and writes included (as the GenAI conventions count input) */
  inputTokens: number | null;
  outputTokens: number | null;
  cacheReadTokens: number | null;
  cacheWriteTokens: number | null;
  costNanoUsd: number;
  run: string;
  cellId: string | null;
  attempt: number | null;
}

export interface ModelCallTracer {
  record(call: ModelCallRecord): void;
  /** Send what is buffered and stop. */
  shutdown(): Promise<void>;
}

/** `base` as an OTLP/HTTP traces URL: a collector's base URL gets `/v1/traces`. */
export function tracesUrl(base: string): string {
  const u = base.replace(/\/+$/, "");
  return u.endsWith("/v1/traces") ? u : `${u}/v1/traces`;
}

export function startModelCallTracing(opts: { endpoint: string; serviceName: string }): ModelCallTracer {
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ "service.name": opts.serviceName }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({ url: tracesUrl(opts.endpoint) }))],
  });
  const tracer = provider.getTracer("evalfleet-gateway");
  return {
    record(c) {
      const attributes: Record<string, string | number> = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": c.provider,
        "gen_ai.request.model": c.requestModel,
        "evalfleet.run": c.run,
        "evalfleet.status": c.status,
        "evalfleet.cost_nano_usd": c.costNanoUsd,
      };
      if (c.responseModel) attributes["gen_ai.response.model"] = c.responseModel;
      if (c.inputTokens !== null) attributes["gen_ai.usage.input_tokens"] = c.inputTokens;
      if (c.outputTokens !== null) attributes["gen_ai.usage.output_tokens"] = c.outputTokens;
      if (c.cacheReadTokens !== null) attributes["gen_ai.usage.cache_read.input_tokens"] = c.cacheReadTokens;
      if (c.cacheWriteTokens !== null)
        attributes["gen_ai.usage.cache_creation.input_tokens"] = c.cacheWriteTokens;
      if (c.httpStatus !== null) attributes["http.response.status_code"] = c.httpStatus;
      if (c.cellId) attributes["evalfleet.cell_id"] = c.cellId;
      if (c.attempt !== null) attributes["evalfleet.attempt"] = c.attempt;
      const failed = c.status !== "ok";
      if (failed)
        attributes["error.type"] =
          c.httpStatus !== null && c.httpStatus >= 400 ? String(c.httpStatus) : c.status;
      const span = tracer.startSpan(`chat ${c.requestModel}`, {
        kind: SpanKind.CLIENT,
        startTime: c.startedAtMs,
        attributes,
      });
      if (failed) span.setStatus({ code: SpanStatusCode.ERROR, message: c.status });
      span.end(c.endedAtMs);
    },
    shutdown: () => provider.shutdown(),
  };
}
