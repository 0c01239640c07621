/**
 * The scripted provider's usage reports, in the shapes the providers' admin APIs answer: Anthropic's
 * `GET /v1/organizations/usage_report/messages` and OpenAI's `GET /v1/organization/usage/completions`, bucketed by
 * the minute each request arrived, grouped by API key id and model. What evalfleet trues its ledger up against when a
 * call reached the provider but its answer reached nobody (a gateway replica killed holding it).
 */
import { createHash } from "node:crypto";
import type { TokenUsage } from "../providers/types.js";

/** An API key's id as the admin API names it (never the key itself). */
export function scriptedKeyId(key: string): string {
  return `apikey_${createHash("sha256").update(key).digest("hex").slice(0, 24)}`;
}

export interface ReportedCall {
  atMs: number;
  key: string;
  model: string;
  billed: TokenUsage | null;
}

interface Sum {
  keyId: string;
  model: string;
  uncached: number;
  cacheRead: number;
  write5m: number;
  write1h: number;
  output: number;
  requests: number;
}

const MINUTE = 60_000;

/** Sums per minute bucket, key id and model of the billed calls in [fromMs, toMs). */
function buckets(calls: readonly ReportedCall[], fromMs: number, toMs: number, keyIds: Set<string> | null) {
  const out = new Map<number, Map<string, Sum>>();
  for (const c of calls) {
    if (!c.billed || c.atMs < fromMs || c.atMs >= toMs) continue;
    const keyId = scriptedKeyId(c.key);
    if (keyIds && !keyIds.has(keyId)) continue;
    const start = Math.floor(c.atMs / MINUTE) * MINUTE;
    const b = out.get(start) ?? new Map<string, Sum>();
    out.set(start, b);
    const k = `${keyId}\u0000${c.model}`;
    const s = b.get(k) ?? {
      keyId,
      model: c.model,
      uncached: 0,
      cacheRead: 0,
      write5m: 0,
      write1h: 0,
      output: 0,
      requests: 0,
    };
    b.set(k, s);
    const u = c.billed;
    const oneHour = Math.min(u.cacheWrite1hTokens, u.cacheWriteTokens);
    s.uncached += Math.max(0, u.inputTokens - u.cacheReadTokens - u.cacheWriteTokens);
    s.cacheRead += u.cacheReadTokens;
    s.write5m += u.cacheWriteTokens - oneHour;
    s.write1h += oneHour;
    s.output += u.outputTokens;
    s.requests += 1;
  }
  return out;
}

/** Every bucket start in [fromMs, toMs), empty ones included, as the providers list them. */
function starts(fromMs: number, toMs: number): number[] {
  const out: number[] = [];
  for (let t = Math.floor(fromMs / MINUTE) * MINUTE; t < toMs; t += MINUTE) out.push(t);
  return out;
}

/** Answer a usage-report request, or null when `path` is not one. */
export function usageReport(
  path: string,
  query: URLSearchParams,
  calls: readonly ReportedCall[],
): { status: number; body: unknown } | null {
  if (path === "/v1/organizations/usage_report/messages") {
    const from = Date.parse(query.get("starting_at") ?? "");
    const to = query.get("ending_at") ? Date.parse(query.get("ending_at") ?? "") : Date.now();
    if (!Number.isFinite(from) || !Number.isFinite(to))
      return {
        status: 400,
        body: { type: "error", error: { type: "invalid_request_error", message: "starting_at: RFC 3339" } },
      };
    if (query.get("bucket_width") !== "1m")
      return {
        status: 400,
        body: {
          type: "error",
          error: { type: "invalid_request_error", message: "only bucket_width=1m here" },
        },
      };
    const ids = query.getAll("api_key_ids[]");
    const by = buckets(calls, from, to, ids.length > 0 ? new Set(ids) : null);
    const data = starts(from, to).map((t) => ({
      starting_at: new Date(t).toISOString(),
      ending_at: new Date(t + MINUTE).toISOString(),
      results: [...(by.get(t)?.values() ?? [])].map((s) => ({
        uncached_input_tokens: s.uncached,
        cache_creation: { ephemeral_5m_input_tokens: s.write5m, ephemeral_1h_input_tokens: s.write1h },
        cache_read_input_tokens: s.cacheRead,
        output_tokens: s.output,
        server_tool_use: { web_search_requests: 0 },
        api_key_id: s.keyId,
        workspace_id: null,
        model: s.model,
        service_tier: "standard",
        context_window: "0-200k",
      })),
    }));
    return { status: 200, body: { data, has_more: false, next_page: null } };
  }
  if (path === "/v1/organization/usage/completions") {
    const from = Number(query.get("start_time")) * 1000;
    const to = query.get("end_time") ? Number(query.get("end_time")) * 1000 : Date.now();
    if (!Number.isFinite(from) || from <= 0 || !Number.isFinite(to))
      return {
        status: 400,
        body: { error: { message: "start_time: unix seconds", type: "invalid_request_error" } },
      };
    const ids = query.getAll("api_key_ids");
    const by = buckets(calls, from, to, ids.length > 0 ? new Set(ids) : null);
    const data = starts(from, to).map((t) => ({
      object: "bucket",
      start_time: t / 1000,
      end_time: (t + MINUTE) / 1000,
      results: [...(by.get(t)?.values() ?? [])].map((s) => ({
        object: "organization.usage.completions.result",
        input_tokens: s.uncached + s.cacheRead + s.write5m + s.write1h,
        input_cached_tokens: s.cacheRead,
        output_tokens: s.output,
        input_audio_tokens: 0,
        output_audio_tokens: 0,
        num_model_requests: s.requests,
        project_id: null,
        user_id: null,
        api_key_id: s.keyId,
        model: s.model,
        batch: false,
      })),
    }));
    return { status: 200, body: { object: "page", data, has_more: false, next_page: null } };
  }
  return null;
}
