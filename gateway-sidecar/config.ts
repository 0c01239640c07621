import { readFile } from "node:fs/promises";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import type { PoolConfig } from "../pacer/bucket.js";
import { ErrorCode, ValidationError } from "../protocol/errors.js";
import type { AliasDef } from "./server.js";

/**
 * The gateway's configuration file (JSON or YAML). Upstream keys are named by environment variable, never
 * written in the file, so the file can be committed and the key stays with the gateway's secrets.
 *
 *   aliases:
 *     cc__sonnet: { provider: anthropic, base_url: https://api.anthropic.com, api_key_env: ANTHROPIC_API_KEY,
 *                   model: claude-sonnet-4-5, runs: [my-run] }
 *   pools:
 *     cc__sonnet: { requests_per_minute: 4000, input_tokens_per_minute: 2000000, output_tokens_per_minute: 400000 }
 */
const AliasSchema = z.strictObject({
  provider: z.enum(["anthropic", "openai"]),
  base_url: z.url(),
  api_key_env: z.string().min(1),
  model: z.string().min(1).optional(),
  pool: z.string().min(1).optional(),
  runs: z.array(z.string().min(1)).optional(),
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
export const GatewayConfigSchema = z.strictObject({
  aliases: z.record(z.string(), AliasSchema).default({}),
  pools: z.record(z.string(), PoolSchema).default({}),
});

export interface LoadedGatewayConfig {
  aliases: Record<string, AliasDef>;
  pools: Record<string, PoolConfig>;
}

export async function loadGatewayConfig(
  path: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<LoadedGatewayConfig> {
  const text = await readFile(path, "utf8");
  const parsed = GatewayConfigSchema.safeParse(path.endsWith(".json") ? JSON.parse(text) : parseYaml(text));
  if (!parsed.success) {
    throw new ValidationError(
      ErrorCode.InvalidConfig,
      `gateway config ${path} is invalid`,
      parsed.error.issues.map((i) => ({ path: i.path.join("."), reason: i.message })),
    );
  }
  const aliases: Record<string, AliasDef> = {};
  const missing: string[] = [];
  for (const [name, a] of Object.entries(parsed.data.aliases)) {
    const apiKey = env[a.api_key_env];
    if (!apiKey) missing.push(`aliases.${name}.api_key_env: $${a.api_key_env} is not set`);
    aliases[name] = {
      upstream: { provider: a.provider, baseUrl: a.base_url, apiKey: apiKey ?? "" },
      ...(a.model ? { model: a.model } : {}),
      ...(a.pool ? { pool: a.pool } : {}),
      ...(a.runs ? { runs: a.runs } : {}),
    };
  }
  if (missing.length > 0) {
    throw new ValidationError(
      ErrorCode.InvalidConfig,
      "gateway upstream keys missing from the environment",
      missing.map((m) => ({ path: m.split(":")[0]!, reason: m.split(": ")[1]! })),
    );
  }
  const pools: Record<string, PoolConfig> = {};
  for (const [name, p] of Object.entries(parsed.data.pools)) {
    pools[name] = {
      limits: {
        ...(p.requests_per_minute ? { requestsPerMinute: p.requests_per_minute } : {}),
        ...(p.input_tokens_per_minute ? { inputTokensPerMinute: p.input_tokens_per_minute } : {}),
        ...(p.output_tokens_per_minute ? { outputTokensPerMinute: p.output_tokens_per_minute } : {}),
        ...(p.tokens_per_minute ? { tokensPerMinute: p.tokens_per_minute } : {}),
      },
      ...(p.burst_ms ? { burstMs: p.burst_ms } : {}),
      ...(p.cache_read_input_weight !== undefined ? { cacheReadInputWeight: p.cache_read_input_weight } : {}),
    };
  }
  return { aliases, pools };
}
