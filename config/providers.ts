import { z } from "zod";
import { defineGroup, httpUrlText, optionalText, setting } from "./setting.js";

/** The model providers a process holds keys for: the gateway (deployed, local) and the local launcher. */

export const PROVIDERS = ["anthropic", "openai"] as const;
export type ProviderName = (typeof PROVIDERS)[number];

/** One provider's upstream: where it answers and the key only this process holds. */
export interface ProviderUpstream {
  provider: ProviderName;
  baseUrl: string;
  apiKey: string;
  /** where the provider's own usage record for this key is read (gateway/true-up.ts), when an admin key is given */
  usageReport?: UsageReportSettings;
}

/** The provider's admin API for this key's usage. */
export interface UsageReportSettings {
  adminKey: string;
  /** the key's id as the admin API names it; absent: the organisation's whole usage */
  apiKeyId?: string;
  /** how long after a call its usage is in the report */
  lagMs: number;
}

/** Providers publish usage with a delay (Anthropic's report is typically complete within minutes). */
export const USAGE_REPORT_LAG_MS = 10 * 60_000;

export type ProviderUpstreams = Partial<Record<ProviderName, ProviderUpstream>>;

type ProviderKeys = Partial<Record<ProviderName | `${ProviderName}_admin`, string>>;

/**
 * `PROVIDER_KEYS`: the Secrets Manager secret the stack passes the gateway, a JSON object of keys by provider (and
 * the admin keys its usage reports need, `anthropic_admin` / `openai_admin`).
 */
const providerKeysText = z
  .string()
  .optional()
  .transform((s, ctx) => {
    if (s === undefined || s.trim() === "") return {} as ProviderKeys;
    let doc: unknown;
    try {
      doc = JSON.parse(s);
    } catch {
      ctx.addIssue({
        code: "custom",
        message: 'is not JSON: store the secret as {"anthropic": "<key>", "openai": "<key>"}',
      });
      return z.NEVER;
    }
    const key = z.string().min(1).optional();
    const parsed = z
      .strictObject({ anthropic: key, openai: key, anthropic_admin: key, openai_admin: key })
      .safeParse(doc);
    if (!parsed.success) {
      ctx.addIssue({
        code: "custom",
        message: `must be a JSON object with "anthropic" and/or "openai" keys (and, for usage reports, "anthropic_admin" / "openai_admin"), each a non-empty string (${parsed.error.issues.map((i) => i.path.join(".") || "(root)").join(", ")} wrong)`,
      });
      return z.NEVER;
    }
    return parsed.data;
  });

export const DEFAULT_BASE_URLS: Record<ProviderName, string> = {
  anthropic: "https://api.anthropic.com",
  openai: "https://api.openai.com",
};

export const providersGroup = defineGroup({
  name: "providers",
  doc: "Model-provider keys, held only by the gateway (and the local launcher, which runs one).",
  settings: {
    keys: setting({
      env: "PROVIDER_KEYS",
      doc: 'provider keys as one JSON object, `{"anthropic": "…", "openai": "…"}` (the stack\'s Secrets Manager secret)',
      schema: providerKeysText,
      secret: true,
    }),
    anthropicKey: setting({
      env: "ANTHROPIC_API_KEY",
      doc: "Anthropic API key (instead of PROVIDER_KEYS)",
      schema: optionalText,
      secret: true,
    }),
    openaiKey: setting({
      env: "OPENAI_API_KEY",
      doc: "OpenAI API key (instead of PROVIDER_KEYS)",
      schema: optionalText,
      secret: true,
    }),
    anthropicAdminKey: setting({
      env: "ANTHROPIC_ADMIN_KEY",
      doc: "an Anthropic admin key (sk-ant-admin…): the gateway trues calls whose answer reached nobody up to the Usage and Cost API",
      schema: optionalText,
      secret: true,
    }),
    anthropicKeyId: setting({
      env: "ANTHROPIC_API_KEY_ID",
      doc: "the id of ANTHROPIC_API_KEY in the Anthropic console (apikey_…), so the usage report is that key's alone",
      schema: optionalText,
    }),
    openaiAdminKey: setting({
      env: "OPENAI_ADMIN_KEY",
      doc: "an OpenAI admin key: the gateway trues calls whose answer reached nobody up to the organization usage API",
      schema: optionalText,
      secret: true,
    }),
    openaiKeyId: setting({
      env: "OPENAI_API_KEY_ID",
      doc: "the id of OPENAI_API_KEY (key_…), so the usage report is that key's alone",
      schema: optionalText,
    }),
    anthropicBaseUrl: setting({
      env: "ANTHROPIC_BASE_URL",
      doc: "where Anthropic calls go (a proxy, a compatible server)",
      schema: httpUrlText,
      default: DEFAULT_BASE_URLS.anthropic,
    }),
    openaiBaseUrl: setting({
      env: "OPENAI_BASE_URL",
      doc: "where OpenAI calls go (a proxy, a compatible server; no /v1)",
      schema: httpUrlText,
      default: DEFAULT_BASE_URLS.openai,
    }),
  },
  compile: (v, ctx): ProviderUpstreams => {
    const out: ProviderUpstreams = {};
    const pairs = [
      [
        "anthropic",
        v.keys.anthropic,
        v.anthropicKey,
        "ANTHROPIC_API_KEY",
        v.anthropicBaseUrl,
        v.keys.anthropic_admin ?? v.anthropicAdminKey,
        v.anthropicKeyId,
      ],
      [
        "openai",
        v.keys.openai,
        v.openaiKey,
        "OPENAI_API_KEY",
        v.openaiBaseUrl,
        v.keys.openai_admin ?? v.openaiAdminKey,
        v.openaiKeyId,
      ],
    ] as const;
    for (const [provider, fromSecret, fromEnv, env, baseUrl, adminKey, apiKeyId] of pairs) {
      if (fromSecret !== undefined && fromEnv !== undefined)
        ctx.issue(
          `PROVIDER_KEYS,${env}`,
          `the ${provider} key is given twice: keep one of PROVIDER_KEYS.${provider} and ${env}`,
        );
      const apiKey = fromSecret ?? fromEnv;
      if (apiKey === undefined) continue;
      out[provider] = { provider, baseUrl, apiKey };
      if (adminKey !== undefined)
        out[provider].usageReport = {
          adminKey,
          ...(apiKeyId === undefined ? {} : { apiKeyId }),
          lagMs: USAGE_REPORT_LAG_MS,
        };
    }
    return out;
  },
});
