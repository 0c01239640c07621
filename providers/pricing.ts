import { createHash } from "node:crypto";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import type { TokenUsage } from "./types.js";

/** Bump whenever an entry of DEFAULT_PRICES changes; every ledger row records the version that priced it. */
export const PRICE_TABLE_VERSION = "2026-12-01.1";

/** One model's list prices in USD per million tokens. Decimal strings keep config prices exact. */
export interface ModelPrice {
  input: string | number;
  output: string | number;
  cacheRead: string | number;
  cacheWrite5m: string | number;
  cacheWrite1h: string | number;
}

// Anthropic: cache write 1.25x (5m) / 2x (1h), read 0.1x. OpenAI: cached-input price per model, no write charge.
const anthropic = (input: string, output: string, w5: string, w1: string, read: string): ModelPrice => ({
  input,
  output,
  cacheRead: read,
  cacheWrite5m: w5,
  cacheWrite1h: w1,
});
const openai = (input: string, output: string, cached: string): ModelPrice => ({
  input,
  output,
  cacheRead: cached,
  cacheWrite5m: input,
  cacheWrite1h: input,
});

/**
 * List prices. Keys match a model id exactly or as a prefix at a `-` boundary (dated snapshots such as
 * claude-sonnet-4-5-20250929); the longest key wins. Family keys (`claude-opus`) catch new versions at the family's
 * highest known price, so an unlisted model is over-charged rather than free.
 */
export const DEFAULT_PRICES: Readonly<Record<string, ModelPrice>> = {
  "claude-opus": anthropic("15", "75", "18.75", "30", "1.5"),
  "claude-opus-4-1": anthropic("15", "75", "18.75", "30", "1.5"),
  "claude-opus-4": anthropic("15", "75", "18.75", "30", "1.5"),
  "claude-opus-4-5": anthropic("5", "25", "6.25", "10", "0.5"),
  "claude-sonnet": anthropic("3", "15", "3.75", "6", "0.3"),
  "claude-sonnet-4-5": anthropic("3", "15", "3.75", "6", "0.3"),
  "claude-sonnet-4": anthropic("3", "15", "3.75", "6", "0.3"),
  "claude-3-7-sonnet": anthropic("3", "15", "3.75", "6", "0.3"),
  "claude-haiku": anthropic("1", "5", "1.25", "2", "0.1"),
  "claude-haiku-4-5": anthropic("1", "5", "1.25", "2", "0.1"),
  "claude-3-5-haiku": anthropic("0.8", "4", "1", "1.6", "0.08"),
  "gpt-4o": openai("2.5", "10", "1.25"),
  "gpt-4o-mini": openai("0.15", "0.6", "0.075"),
  "gpt-4.1": openai("2", "8", "0.5"),
  "gpt-4.1-mini": openai("0.4", "1.6", "0.1"),
  "gpt-4.1-nano": openai("0.1", "0.4", "0.025"),
  "gpt-5": openai("1.25", "10", "0.125"),
  "gpt-5-codex": openai("1.25", "10", "0.125"),
  "gpt-5-mini": openai("0.25", "2", "0.025"),
  "gpt-5-nano": openai("0.05", "0.4", "0.005"),
  o3: openai("2", "8", "0.5"),
  "o4-mini": openai("1.1", "4.4", "0.275"),
};

/** Prices as exact integers: atto-USD per token (USD/Mtok × 10^12), so $0.0375/Mtok is 37_500_000_000n. */
interface ExactPrice {
  input: bigint;
  output: bigint;
  cacheRead: bigint;
  cacheWrite5m: bigint;
  cacheWrite1h: bigint;
}

const ATTO_PER_NANO = 1_000_000_000n;

/** Parse a non-negative decimal (string or number) of USD/Mtok into atto-USD per token, exactly. */
export function usdPerMtokToAttoPerToken(v: string | number): bigint {
  const s = typeof v === "number" ? numberToDecimal(v) : v.trim();
  const m = /^(\d+)(?:\.(\d+))?$/.exec(s);
  if (!m)
    throw new EvalfleetError(ErrorCode.InvalidConfig, `price '${String(v)}' is not a non-negative decimal`);
  const frac = m[2] ?? "";
  if (frac.length > 12)
    throw new EvalfleetError(ErrorCode.InvalidConfig, `price '${s}' has more than 12 decimals`);
  return BigInt(m[1]!) * 10n ** 12n + BigInt(frac.padEnd(12, "0") || "0");
}

function numberToDecimal(n: number): string {
  if (!Number.isFinite(n) || n < 0) return String(n);
  // toString gives the shortest round-trip form; expand exponents so 1e-7 parses.
  const s = String(n);
  return s.includes("e") ? n.toFixed(12).replace(/0+$/, "").replace(/\.$/, "") : s;
}

function exact(p: ModelPrice): ExactPrice {
  return {
    input: usdPerMtokToAttoPerToken(p.input),
    output: usdPerMtokToAttoPerToken(p.output),
    cacheRead: usdPerMtokToAttoPerToken(p.cacheRead),
    cacheWrite5m: usdPerMtokToAttoPerToken(p.cacheWrite5m),
    cacheWrite1h: usdPerMtokToAttoPerToken(p.cacheWrite1h),
  };
}

/**
 * Exact cost in nano-USD, rounded UP once per call (over-charge is safe, under-charge never). Uncached input is the
 * total input minus cache reads and writes, each priced at its own weight; reasoning is inside output.
 */
export function exactCostNanoUsd(price: ExactPrice, u: TokenUsage): bigint {
  const write1h = BigInt(Math.min(u.cacheWrite1hTokens, u.cacheWriteTokens));
  const write5m = BigInt(u.cacheWriteTokens) - write1h;
  const uncached = BigInt(Math.max(0, u.inputTokens - u.cacheReadTokens - u.cacheWriteTokens));
  const atto =
    uncached * price.input +
    BigInt(u.cacheReadTokens) * price.cacheRead +
    write5m * price.cacheWrite5m +
    write1h * price.cacheWrite1h +
    BigInt(u.outputTokens) * price.output;
  return (atto + ATTO_PER_NANO - 1n) / ATTO_PER_NANO;
}

export interface Priced {
  costNanoUsd: number;
  /** the price-table key that priced the call ("" when unknown and the fallback was used) */
  priceKey: string;
  known: boolean;
  priceVersion: string;
}

/**
 * A price table: the defaults overlaid with config-supplied prices (whole entries or single fields). The version
 * string names the overrides too, so a row says exactly which prices made it.
 */
export class PriceTable {
  readonly version: string;
  private readonly prices = new Map<string, ExactPrice>();
  private readonly keys: string[];
  private readonly fallback: ExactPrice;
  private readonly cache = new Map<string, string>();

  constructor(overrides: Record<string, Partial<ModelPrice>> = {}) {
    const merged: Record<string, ModelPrice> = { ...DEFAULT_PRICES };
    for (const [model, p] of Object.entries(overrides)) {
      const base = merged[model];
      const full = { ...base, ...p } as Partial<ModelPrice>;
      if (full.input === undefined || full.output === undefined) {
        throw new EvalfleetError(
          ErrorCode.InvalidConfig,
          `price for '${model}' needs at least input and output`,
        );
      }
      merged[model] = {
        input: full.input,
        output: full.output,
        cacheRead: full.cacheRead ?? full.input,
        cacheWrite5m: full.cacheWrite5m ?? full.input,
        cacheWrite1h: full.cacheWrite1h ?? full.cacheWrite5m ?? full.input,
      };
    }
    for (const [k, p] of Object.entries(merged)) this.prices.set(k, exact(p));
    this.keys = [...this.prices.keys()].sort((a, b) => b.length - a.length);
    // Unknown models are priced at the most expensive entry on every axis: never free, never under.
    const all = [...this.prices.values()];
    const max = (f: keyof ExactPrice) => all.reduce((m, p) => (p[f] > m ? p[f] : m), 0n);
    this.fallback = {
      input: max("input"),
      output: max("output"),
      cacheRead: max("cacheRead"),
      cacheWrite5m: max("cacheWrite5m"),
      cacheWrite1h: max("cacheWrite1h"),
    };
    const hasOverrides = Object.keys(overrides).length > 0;
    this.version = hasOverrides
      ? `${PRICE_TABLE_VERSION}+cfg.${createHash("sha256").update(JSON.stringify(overrides)).digest("hex").slice(0, 10)}`
      : PRICE_TABLE_VERSION;
  }

  /** The table key pricing `model`, or "" if none matches. */
  keyFor(model: string): string {
    const hit = this.cache.get(model);
    if (hit !== undefined) return hit;
    const m = model.toLowerCase().replace(/^(anthropic|openai)\//, "");
    let found = "";
    for (const k of this.keys) {
      if (m === k || m.startsWith(`${k}-`) || m.startsWith(`${k}@`) || m.startsWith(`${k}:`)) {
        found = k;
        break;
      }
    }
    this.cache.set(model, found);
    return found;
  }

  priceOf(model: string): ExactPrice {
    return this.prices.get(this.keyFor(model)) ?? this.fallback;
  }

  cost(model: string, usage: TokenUsage): Priced {
    const key = this.keyFor(model);
    const price = this.prices.get(key) ?? this.fallback;
    return {
      costNanoUsd: Number(exactCostNanoUsd(price, usage)),
      priceKey: key,
      known: key !== "",
      priceVersion: this.version,
    };
  }

  /**
   * The fewest nano-USD a call can cost: `inputTokens` all at the cheapest input weight and one output token. Used
   * to refuse a call the remaining budget cannot pay for even at its smallest.
   */
  minCostNanoUsd(model: string, inputTokens: number): bigint {
    const p = this.priceOf(model);
    // BigInt has no Math.min.
    let cheapestIn = p.input;
    if (p.cacheRead < cheapestIn) cheapestIn = p.cacheRead;
    return (BigInt(inputTokens) * cheapestIn + p.output + ATTO_PER_NANO - 1n) / ATTO_PER_NANO;
  }

  /**
   * How many output tokens `remainingNanoUsd` pays for after `inputTokens` at the full input price (the worst case
   * for uncached input), rounded down.
   */
  affordableOutputTokens(model: string, inputTokens: number, remainingNanoUsd: bigint): number {
    const p = this.priceOf(model);
    const left = remainingNanoUsd * ATTO_PER_NANO - BigInt(inputTokens) * p.input;
    if (left <= 0n || p.output === 0n) return left <= 0n ? 0 : Number.MAX_SAFE_INTEGER;
    const n = left / p.output;
    return n > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(n);
  }
}
