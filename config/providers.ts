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
}

export type ProviderUpstreams = Partial<Record<ProviderName, ProviderUpstream>>;

/** `PROVIDER_KEYS`: the Secrets Manager secret the stack passes the gateway, a JSON object of keys by provider. */
const providerKeysText = z
  .string()
  .optional()
  .transform((s, ctx) => {
    if (s === undefined || s.trim() === "") return {} as Partial<Record<ProviderName, string>>;
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
    const parsed = z
      .strictObject({ anthropic: z.string().min(1).optional(), openai: z.string().min(1).optional() })
      .safeParse(doc);
    if (!parsed.success) {
      ctx.addIssue({
        code: "custom",
        message: `must be a JSON object with "anthropic" and/or "openai" keys, each a non-empty string (${parsed.error.issues.map((i) => i.path.join(".") || "(root)").join(", ")} wrong)`,
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
      ["anthropic", v.keys.anthropic, v.anthropicKey, "ANTHROPIC_API_KEY", v.anthropicBaseUrl],
      ["openai", v.keys.openai, v.openaiKey, "OPENAI_API_KEY", v.openaiBaseUrl],
    ] as const;
    for (const [provider, fromSecret, fromEnv, env, baseUrl] of pairs) {
      if (fromSecret !== undefined && fromEnv !== undefined)
        ctx.issue(
          `PROVIDER_KEYS,${env}`,
          `the ${provider} key is given twice: keep one of PROVIDER_KEYS.${provider} and ${env}`,
        );
      const apiKey = fromSecret ?? fromEnv;
      if (apiKey !== undefined) out[provider] = { provider, baseUrl, apiKey };
    }
    return out;
  },
});
