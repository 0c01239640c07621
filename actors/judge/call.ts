/**
 * One judge call through the gateway (or any Anthropic / OpenAI compatible upstream) under the judge's own key,
 * metered and priced the way the shim meters a harness's calls.
 */
import { setTimeout as delay } from "node:timers/promises";
import type { ModelSpec } from "../../protocol/config.js";
import { anthropicJsonResult } from "../../providers/anthropic.js";
import { openaiJsonResult } from "../../providers/openai.js";
import type { ModelPrice, PriceTable } from "../../providers/pricing.js";
import { PriceTable as Prices } from "../../providers/pricing.js";
import { emptyUsage, type TokenUsage } from "../../providers/types.js";

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

/** A model's config prices (USD/Mtok) as a price-table entry; absent → the default table prices it. */
export function priceTableFor(model: ModelSpec): PriceTable {
  const p = model.prices;
  if (!p) return new Prices();
  const entry: Partial<ModelPrice> = { input: p.input_per_mtok, output: p.output_per_mtok };
  if (p.cache_read_per_mtok !== undefined) entry.cacheRead = p.cache_read_per_mtok;
  if (p.cache_write_per_mtok !== undefined) entry.cacheWrite5m = p.cache_write_per_mtok;
  if (p.cache_write_1h_per_mtok !== undefined) entry.cacheWrite1h = p.cache_write_1h_per_mtok;
  return new Prices({ [modelId(model)]: entry });
}

/** The model id sent on the wire: the alias the gateway maps, else the name. */
export function modelId(model: ModelSpec): string {
  return model.alias ?? model.name;
}

function endpointOf(model: ModelSpec): { path: string; endpoint: "messages" | "chat_completions" } {
  return model.provider === "openai"
    ? { path: "/v1/chat/completions", endpoint: "chat_completions" }
    : { path: "/v1/messages", endpoint: "messages" };
}

export function judgeEndpoint(model: ModelSpec): "messages" | "chat_completions" {
  return endpointOf(model).endpoint;
}

function requestOf(req: JudgeCallRequest): { url: string; init: RequestInit } {
  const base = req.baseUrl.replace(/\/+$/, "").replace(/\/v1$/, "");
  const id = modelId(req.model);
  const headers: Record<string, string> = { "content-type": "application/json", ...req.headers };
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
  const { url, init } = requestOf(req);
  const started = Date.now();
  const startedAt = new Date(started).toISOString();
  const id = modelId(req.model);
  let res: Response;
  let bodyText: string;
  try {
    res = await fetch(url, init);
    bodyText = await res.text();
  } catch (err) {
    if (req.signal?.aborted) throw err;
    return {
      status: "error",
      httpStatus: null,
      usage: emptyUsage(),
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
  const priced = prices.cost(id, meter.usage);
  const status = statusOf(res.status);
  return {
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
  const max = opts.maxAttempts ?? 3;
  const base = opts.baseDelayMs ?? 1_000;
  const attempts: JudgeAttempt[] = [];
  for (let i = 0; i < max; i++) {
    const a = await callOnce(req, prices);
    attempts.push(a);
    await opts.onAttempt?.(a, i);
    if (!retryable(a) || i === max - 1) break;
    await delay(base * 2 ** i, undefined, req.signal ? { signal: req.signal } : undefined);
  }
  return attempts;
}
