/**
 * Reading a provider's own record of what a key used, from its admin API: Anthropic's Usage and Cost API
 * (`GET /v1/organizations/usage_report/messages`, an `sk-ant-admin…` key) and OpenAI's organization usage API
 * (`GET /v1/organization/usage/completions`, an admin key), in one-minute buckets, summed per model. The gateway trues
 * its spend log up against it (gateway/true-up.ts) for the calls whose answer reached nobody.
 */
import { ErrorCode, EvalfleetError, RetryableError } from "../protocol/errors.js";
import type { Provider } from "./types.js";

/** Where a provider's usage report is read, and for which key. */
export interface UsageReportSource {
  provider: Provider;
  /** the upstream's base URL (no /v1) */
  baseUrl: string;
  adminKey: string;
  /** the upstream key's id as the admin API names it; absent: the whole organisation's usage */
  apiKeyId?: string;
  /** how long after a call the report is complete (providers publish usage with a delay) */
  lagMs: number;
}

/** A model's tokens in the report, by how they are priced. */
export interface ReportedTokens {
  uncachedInput: number;
  cacheRead: number;
  cacheWrite5m: number;
  cacheWrite1h: number;
  output: number;
}

const MINUTE = 60_000;
const MAX_PAGES = 100;

function add(m: Map<string, ReportedTokens>, model: string, t: ReportedTokens): void {
  const s = m.get(model) ?? { uncachedInput: 0, cacheRead: 0, cacheWrite5m: 0, cacheWrite1h: 0, output: 0 };
  s.uncachedInput += t.uncachedInput;
  s.cacheRead += t.cacheRead;
  s.cacheWrite5m += t.cacheWrite5m;
  s.cacheWrite1h += t.cacheWrite1h;
  s.output += t.output;
  m.set(model, s);
}

const n = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) ? v : 0);

/**
 * The key's usage per model over whole minutes [fromMs, toMs) (fromMs rounded down, toMs up). Throws a retryable
 * error when the provider cannot be asked now, a fatal one when it refuses (a wrong admin key).
 */
export async function fetchUsageReport(
  src: UsageReportSource,
  fromMs: number,
  toMs: number,
  signal?: AbortSignal,
): Promise<Map<string, ReportedTokens>> {
  const from = Math.floor(fromMs / MINUTE) * MINUTE;
  const to = Math.ceil(toMs / MINUTE) * MINUTE;
  const out = new Map<string, ReportedTokens>();
  let page: string | null = null;
  for (let i = 0; i < MAX_PAGES; i++) {
    const q = new URLSearchParams();
    let url: string;
    const headers: Record<string, string> = {};
    if (src.provider === "anthropic") {
      q.set("starting_at", new Date(from).toISOString());
      q.set("ending_at", new Date(to).toISOString());
      q.set("bucket_width", "1m");
      q.set("limit", "1440");
      q.append("group_by[]", "model");
      if (src.apiKeyId) q.append("api_key_ids[]", src.apiKeyId);
      url = `${src.baseUrl}/v1/organizations/usage_report/messages`;
      headers["x-api-key"] = src.adminKey;
      headers["anthropic-version"] = "2023-06-01";
    } else {
      q.set("start_time", String(from / 1000));
      q.set("end_time", String(to / 1000));
      q.set("bucket_width", "1m");
      q.set("limit", "1440");
      q.set("group_by", "model");
      if (src.apiKeyId) q.append("api_key_ids", src.apiKeyId);
      url = `${src.baseUrl}/v1/organization/usage/completions`;
      headers.authorization = `Bearer ${src.adminKey}`;
    }
    if (page) q.set("page", page);
    let res: Response;
    try {
      res = await fetch(`${url}?${q}`, { headers, signal: signal ?? AbortSignal.timeout(30_000) });
    } catch (err) {
      throw new RetryableError(
        ErrorCode.Unavailable,
        `${src.provider} usage report could not be read: ${(err as Error).message}`,
      );
    }
    const text = await res.text();
    if (!res.ok) {
      const why = `${src.provider} usage report answered ${res.status}: ${text.slice(0, 300)}`;
      if (res.status === 429 || res.status >= 500) throw new RetryableError(ErrorCode.Unavailable, why);
      throw new EvalfleetError(
        res.status === 401 || res.status === 403 ? ErrorCode.Unauthorized : ErrorCode.InvalidConfig,
        res.status === 401 || res.status === 403
          ? `${why} (the usage report needs the organisation's admin key: check usage_report.admin_key_env)`
          : why,
      );
    }
    const doc = JSON.parse(text) as { data?: unknown[]; has_more?: boolean; next_page?: string | null };
    for (const bucket of doc.data ?? []) {
      for (const r of ((bucket as { results?: unknown[] }).results ?? []) as Record<string, unknown>[]) {
        const model = typeof r.model === "string" ? r.model : "";
        if (src.provider === "anthropic") {
          const cc = (r.cache_creation ?? {}) as Record<string, unknown>;
          add(out, model, {
            uncachedInput: n(r.uncached_input_tokens),
            cacheRead: n(r.cache_read_input_tokens),
            cacheWrite5m: n(cc.ephemeral_5m_input_tokens),
            cacheWrite1h: n(cc.ephemeral_1h_input_tokens),
            output: n(r.output_tokens),
          });
        } else {
          const cached = n(r.input_cached_tokens);
          add(out, model, {
            uncachedInput: Math.max(0, n(r.input_tokens) - cached),
            cacheRead: cached,
            cacheWrite5m: 0,
            cacheWrite1h: 0,
            output: n(r.output_tokens),
          });
        }
      }
    }
    if (!doc.has_more || !doc.next_page) return out;
    page = doc.next_page;
  }
  throw new RetryableError(
    ErrorCode.Unavailable,
    `${src.provider} usage report: more than ${MAX_PAGES} pages`,
  );
}
