import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { PROVIDERS, type ProviderName, type ProviderUpstream, USAGE_REPORT_LAG_MS } from "./providers.js";
import { type CompileContext, defineGroup, optionalFileText, setting } from "./setting.js";

/**
 * The gateway's own file of static aliases and pools (JSON or YAML), named by EVALFLEET_GATEWAY_CONFIG / --config.
 * Keys are never written in the file: an alias uses its provider's key (PROVIDER_KEYS, ANTHROPIC_API_KEY,
 * OPENAI_API_KEY), or names another variable with `api_key_env`, so the file can be committed.
 *
 *   aliases:
 *     cc__sonnet: { provider: anthropic, base_url: https://api.anthropic.com, model: claude-sonnet-4-5, runs: [my-run] }
 *   pools:
 *     cc__sonnet: { requests_per_minute: 4000, input_tokens_per_minute: 2000000, output_tokens_per_minute: 400000 }
 *
 * An alias's `usage_report` (`{ admin_key_env, api_key_id?, lag_seconds? }`) lets the gateway true calls whose
 * answer reached nobody up to the provider's own usage record (gateway/true-up.ts).
 *
 * Aliases not in the file are the runs' model names, resolved per run from the database to their provider.
 */
const AliasSchema = z.strictObject({
  provider: z.enum(PROVIDERS),
  base_url: z.url().optional(),
  api_key_env: z
    .string()
    .regex(/^[A-Z][A-Z0-9_]*$/)
    .optional(),
  model: z.string().min(1).optional(),
  pool: z.string().min(1).optional(),
  runs: z.array(z.string().min(1)).optional(),
  /** the provider's usage report for this key (gateway/true-up.ts) */
  usage_report: z
    .strictObject({
      admin_key_env: z.string().regex(/^[A-Z][A-Z0-9_]*$/),
      api_key_id: z.string().min(1).optional(),
      lag_seconds: z.number().int().nonnegative().optional(),
    })
    .optional(),
});
const PerMinute = z.number().int().positive().optional();
const PoolSchema = z.strictObject({
  requests_per_minute: PerMinute,
  input_tokens_per_minute: PerMinute,
  output_tokens_per_minute: PerMinute,
  tokens_per_minute: PerMinute,
  burst_ms: z.number().int().positive().optional(),
  cache_read_input_weight: z.number().min(0).max(1).optional(),
});
export const GatewayFileSchema = z.strictObject({
  aliases: z.record(z.string(), AliasSchema).default({}),
  pools: z.record(z.string(), PoolSchema).default({}),
});

/** A static alias: the upstream it forwards to (key included), and what it may be used for. */
export interface AliasSettings {
  upstream: ProviderUpstream;
  model?: string;
  pool?: string;
  runs?: string[];
}

/** A pool's configured limits (the pacer's PoolConfig shape). */
export interface PoolSettings {
  limits: {
    requestsPerMinute?: number;
    inputTokensPerMinute?: number;
    outputTokensPerMinute?: number;
    tokensPerMinute?: number;
  };
  burstMs?: number;
  cacheReadInputWeight?: number;
}

export interface GatewayFileSettings {
  /** the file's path, when one was given */
  file?: string;
  aliases: Record<string, AliasSettings>;
  pools: Record<string, PoolSettings>;
}

const DEFAULT_BASE: Record<ProviderName, string> = {
  anthropic: "ANTHROPIC_BASE_URL",
  openai: "OPENAI_BASE_URL",
};
const KEY_ENV: Record<ProviderName, string> = { anthropic: "ANTHROPIC_API_KEY", openai: "OPENAI_API_KEY" };

function providerKey(ctx: CompileContext, provider: ProviderName): string | undefined {
  const fromSecret = ctx.value<Partial<Record<ProviderName, string>>>("PROVIDER_KEYS")?.[provider];
  return fromSecret ?? ctx.value<string>(KEY_ENV[provider]);
}

function readGatewayFile(ctx: CompileContext, file: string): z.infer<typeof GatewayFileSchema> | undefined {
  let doc: unknown;
  try {
    const text = readFileSync(file, "utf8");
    doc = file.endsWith(".json") ? JSON.parse(text) : parseYaml(text);
  } catch (err) {
    ctx.issue("EVALFLEET_GATEWAY_CONFIG", `${file} is not valid JSON or YAML: ${(err as Error).message}`);
    return undefined;
  }
  const parsed = GatewayFileSchema.safeParse(doc ?? {});
  if (!parsed.success) {
    for (const i of parsed.error.issues)
      ctx.issue(`EVALFLEET_GATEWAY_CONFIG (${file}): ${i.path.join(".") || "(root)"}`, i.message);
    return undefined;
  }
  return parsed.data;
}

export const gatewayFileGroup = defineGroup({
  name: "gateway-file",
  doc: "The gateway's static aliases and pools.",
  settings: {
    file: setting({
      env: "EVALFLEET_GATEWAY_CONFIG",
      flag: "config",
      doc: "a JSON or YAML file of static aliases and pool limits (keys are never in it)",
      schema: optionalFileText,
    }),
  },
  compile: (v, ctx): GatewayFileSettings => {
    if (v.file === undefined) return { aliases: {}, pools: {} };
    const doc = readGatewayFile(ctx, v.file);
    if (!doc) return { file: v.file, aliases: {}, pools: {} };
    const aliases: Record<string, AliasSettings> = {};
    for (const [name, a] of Object.entries(doc.aliases)) {
      const apiKey =
        a.api_key_env === undefined ? providerKey(ctx, a.provider) : (ctx.env[a.api_key_env] ?? undefined);
      if (!apiKey) {
        ctx.issue(
          `EVALFLEET_GATEWAY_CONFIG (${v.file}): aliases.${name}`,
          a.api_key_env === undefined
            ? `no ${a.provider} key: set PROVIDER_KEYS ({"${a.provider}": "…"}) or ${KEY_ENV[a.provider]}`
            : `its api_key_env ${a.api_key_env} is not set in the gateway's environment`,
        );
        continue;
      }
      const baseUrl = (a.base_url ?? ctx.value<string>(DEFAULT_BASE[a.provider]) ?? "").replace(/\/+$/, "");
      const alias: AliasSettings = { upstream: { provider: a.provider, baseUrl, apiKey } };
      if (a.usage_report) {
        const adminKey = ctx.env[a.usage_report.admin_key_env];
        if (!adminKey) {
          ctx.issue(
            `EVALFLEET_GATEWAY_CONFIG (${v.file}): aliases.${name}.usage_report`,
            `its admin_key_env ${a.usage_report.admin_key_env} is not set in the gateway's environment`,
          );
          continue;
        }
        alias.upstream.usageReport = {
          adminKey,
          ...(a.usage_report.api_key_id ? { apiKeyId: a.usage_report.api_key_id } : {}),
          lagMs:
            a.usage_report.lag_seconds === undefined
              ? USAGE_REPORT_LAG_MS
              : a.usage_report.lag_seconds * 1000,
        };
      }
      if (a.model) alias.model = a.model;
      if (a.pool) alias.pool = a.pool;
      if (a.runs) alias.runs = a.runs;
      aliases[name] = alias;
    }
    const pools: Record<string, PoolSettings> = {};
    for (const [name, p] of Object.entries(doc.pools)) {
      const limits: PoolSettings["limits"] = {};
      if (p.requests_per_minute) limits.requestsPerMinute = p.requests_per_minute;
      if (p.input_tokens_per_minute) limits.inputTokensPerMinute = p.input_tokens_per_minute;
      if (p.output_tokens_per_minute) limits.outputTokensPerMinute = p.output_tokens_per_minute;
      if (p.tokens_per_minute) limits.tokensPerMinute = p.tokens_per_minute;
      const pool: PoolSettings = { limits };
      if (p.burst_ms) pool.burstMs = p.burst_ms;
      if (p.cache_read_input_weight !== undefined) pool.cacheReadInputWeight = p.cache_read_input_weight;
      pools[name] = pool;
    }
    return { file: v.file, aliases, pools };
  },
});
