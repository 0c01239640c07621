/**
 * One judge call through the gateway (or any Anthropic / OpenAI compatible upstream) under the judge's own key,
 * metered and priced the way the shim meters a harness's calls.
 */
import { randomUUID } from "node:crypto";
import { retry } from "../../lib/retry.js";
import type { ModelSpec } from "../../protocol/config.js";
import { AttributionHeaders } from "../../protocol/headers.js";
import { anthropicJsonResult } from "../../providers/anthropic.js";
import { openaiJsonResult } from "../../providers/openai.js";
import type { PriceTable } from "../../providers/pricing.js";
import { modelPriceTable, wireModelId } from "../../providers/run-prices.js";
import { emptyTokenUsage, type TokenUsage } from "../../providers/types.js";

export interface JudgeCallRequest {
  baseUrl: string;
  apiKey: string;
  model: ModelSpec;
  system: string;
  user: string;
  maxTokens: number;
  /** Attribution headers the gateway understands (never forwarded upstream). */
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

/** One HTTP attempt, as the ledger records it. */
export interface JudgeAttempt {
  /** sent to the gateway as x-evalfleet-call and kept as the ledger row's id: the two logs match call by call */
  callId: string;
  status: "ok" | "error" | "rate_limited" | "overloaded";
  httpStatus: number | null;
  usage: TokenUsage;
  /** The model the provider says served the call. */
  servedModel: string;
  costNanoUsd: number;
  priceVersion: string;
  latencyMs: number;
  startedAt: string;
  text: string;
  error: string | null;
}

/** The judge model's config prices over the pinned data. */
export function priceTableFor(model: ModelSpec): PriceTable {
  return modelPriceTable(model);
}

function endpointOf(model: ModelSpec): { path: string; endpoint: "messages" | "chat_completions" } {
  return model.provider === "openai"
    ? { path: "/v1/chat/completions", endpoint: "chat_completions" }
    : { path: "/v1/messages", endpoint: "messages" };
}

export function judgeEndpoint(model: ModelSpec): "messages" | "chat_completions" {
  return endpointOf(model).endpoint;
}

function requestOf(req: JudgeCallRequest, callId: string): { url: string; init: RequestInit } {
  const base = req.baseUrl.replace(/\/+$/, "").replace(/\/v1$/, "");
  const id = wireModelId(req.model);
  const headers: Record<string, string> = {
    "content-type": "application/json",
    ...req.headers,
    [AttributionHeaders.call]: callId,
  };
  let body: unknown;
  if (req.model.provider === "openai") {
    headers.authorization = `Bearer ${req.apiKey}`;
    body = {
      model: id,
      max_completion_tokens: req.maxTokens,
      messages: [
        { role: "system", content: req.system },
        { role: "user", content: req.user },
      ],
    };
  } else {
    headers["x-api-key"] = req.apiKey;
    headers["anthropic-version"] = "2023-06-01";
    body = {
      model: id,
      max_tokens: req.maxTokens,
      temperature: 0,
      system: req.system,
      messages: [{ role: "user", content: req.user }],
    };
  }
  const init: RequestInit = { method: "POST", headers, body: JSON.stringify(body) };
  if (req.signal) init.signal = req.signal;
  return { url: `${base}${endpointOf(req.model).path}`, init };
}

function textOf(provider: ModelSpec["provider"], bodyText: string): string {
  try {
    const body = JSON.parse(bodyText) as Record<string, unknown>;
    if (provider === "openai") {
      const choice = (body.choices as Array<{ message?: { content?: unknown } }> | undefined)?.[0];
      return typeof choice?.message?.content === "string" ? choice.message.content : "";
    }
    const blocks = (body.content as Array<{ type?: string; text?: unknown }> | undefined) ?? [];
    return blocks
      .filter((b) => b.type === "text" && typeof b.text === "string")
      .map((b) => b.text)
      .join("");
  } catch {
    return "";
  }
}

function statusOf(http: number): JudgeAttempt["status"] {
  if (http >= 200 && http < 300) return "ok";
  if (http === 429) return "rate_limited";
  if (http === 529 || http === 503) return "overloaded";
  return "error";
}

/** One attempt. Network failures are an attempt too (no usage, nothing billed). */
export async function callOnce(req: JudgeCallRequest, prices: PriceTable): Promise<JudgeAttempt> {
  const callId = randomUUID();
  const { url, init } = requestOf(req, callId);
  const started = Date.now();
  const startedAt = new Date(started).toISOString();
  const id = wireModelId(req.model);
  let res: Response;
  let bodyText: string;
  try {
    res = await fetch(url, init);
    bodyText = await res.text();
  } catch (err) {
    if (req.signal?.aborted) throw err;
    return {
      callId,
      status: "error",
      httpStatus: null,
      usage: emptyTokenUsage(),
      servedModel: id,
      costNanoUsd: 0,
      priceVersion: prices.version,
      latencyMs: Date.now() - started,
      startedAt,
      text: "",
      error: `cannot reach ${url}: ${(err as Error).message}`,
    };
  }
  const meter =
    req.model.provider === "openai" ? openaiJsonResult(bodyText, "chat") : anthropicJsonResult(bodyText);
  const priced = prices.cost(id, meter.usage, started);
  const status = statusOf(res.status);
  return {
    callId,
    status,
    httpStatus: res.status,
    usage: meter.usage,
    servedModel: meter.model ?? id,
    // Priced whenever the provider reported usage, error or not: what was billed counts.
    costNanoUsd: meter.reported ? priced.costNanoUsd : 0,
    priceVersion: priced.priceVersion,
    latencyMs: Date.now() - started,
    startedAt,
    text: status === "ok" ? textOf(req.model.provider, bodyText) : "",
    error: status === "ok" ? null : `HTTP ${res.status}: ${(meter.error?.message ?? bodyText).slice(0, 500)}`,
  };
}

/** Statuses worth another try: rate limits, overload, upstream trouble, no answer at all. */
export function retryable(a: JudgeAttempt): boolean {
  if (a.status === "ok") return false;
  return a.httpStatus === null || a.httpStatus === 408 || a.httpStatus === 429 || a.httpStatus >= 500;
}

export interface RetryOptions {
  maxAttempts?: number;
  baseDelayMs?: number;
  onAttempt?: (a: JudgeAttempt, retries: number) => Promise<void>;
}

/** Call until an answer (or a non-retryable error, or attempts run out); every attempt is reported. */
export async function callJudge(
  req: JudgeCallRequest,
  prices: PriceTable,
  opts: RetryOptions = {},
): Promise<JudgeAttempt[]> {
  const attempts: JudgeAttempt[] = [];
  const base = opts.baseDelayMs ?? 1_000;
  await retry(
    async (i) => {
      const a = await callOnce(req, prices);
      attempts.push(a);
      await opts.onAttempt?.(a, i);
      return a;
    },
    {
      tries: opts.maxAttempts ?? 3,
      baseMs: base,
      maxMs: 30 * base,
      retryValue: retryable,
      ...(req.signal ? { signal: req.signal } : {}),
    },
  );
  return attempts;
}
