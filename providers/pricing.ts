import { createHash } from "node:crypto";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import {
  type DataModel,
  findDataModel,
  flat,
  PRICE_DATA_VERSION,
  periodAt,
  type Rate,
  type RatePeriod,
  type Rates,
  rateAt,
  usdPerMtokToAttoPerToken,
} from "./price-data.js";
import type { Provider, TokenUsage } from "./types.js";

export { PRICE_DATA_VERSION, usdPerMtokToAttoPerToken } from "./price-data.js";

/** The version of the prices a table without run-config prices uses: the pinned data package. */
export const PRICE_TABLE_VERSION = PRICE_DATA_VERSION;

/** One model's prices from a run config, in USD per million tokens. Decimal strings keep them exact. */
export interface ModelPrice {
  input: string | number;
  output: string | number;
  cacheRead?: string | number;
  cacheWrite5m?: string | number;
  cacheWrite1h?: string | number;
}

/** A run-config price and the wire its model is served over (which decides the defaults of absent cache rates). */
export interface PriceOverride extends ModelPrice {
  provider?: Provider;
}

/** Where a model's prices came from. */
export type PriceSource = "config" | "data";

/** A model the table can price. */
export interface PricedModel {
  /** the config name or the data's model id that priced it */
  key: string;
  source: PriceSource;
  provider: Provider | undefined;
  /** the model's context window when the data gives one (the largest input + output a call can have) */
  contextWindow: number | undefined;
  periods: readonly RatePeriod[];
}

export interface Priced {
  costNanoUsd: number;
  /** the config name or data model id that priced the call */
  priceKey: string;
  known: true;
  priceVersion: string;
}

const ATTO_PER_NANO = 1_000_000_000n;

/**
 * Exact cost in nano-USD, rounded UP once per call (over-charge is safe, under-charge never). Uncached input is the
 * total input minus cache reads and writes, each priced at its own rate; reasoning is inside output. Tiered rates
 * are taken at the call's total input, as the providers bill them.
 */
export function exactCostNanoUsd(rates: Rates, u: TokenUsage): bigint {
  const n = u.inputTokens;
  const write1h = BigInt(Math.min(u.cacheWrite1hTokens, u.cacheWriteTokens));
  const write5m = BigInt(u.cacheWriteTokens) - write1h;
  const uncached = BigInt(Math.max(0, u.inputTokens - u.cacheReadTokens - u.cacheWriteTokens));
  const atto =
    uncached * rateAt(rates.input, n) +
    BigInt(u.cacheReadTokens) * rateAt(rates.cacheRead, n) +
    write5m * rateAt(rates.cacheWrite5m, n) +
    write1h * rateAt(rates.cacheWrite1h, n) +
    BigInt(u.outputTokens) * rateAt(rates.output, n);
  return (atto + ATTO_PER_NANO - 1n) / ATTO_PER_NANO;
}

/** Which cache writes a request can cause: decides the highest input rate its worst case is priced at. */
export type CacheWrites = "none" | "5m" | "1h";

/**
 * A price table: the pinned data (`@pydantic/genai-prices`) with run-config prices over it. A model neither the
 * config nor the data knows has no price — there is no family or most-expensive fallback — and pricing it throws;
 * the planner refuses such a run and the shim and gateway refuse such a call before it is forwarded. The version
 * names the data and, when there are config prices, a hash of them, so a ledger row says exactly which prices made it.
 */
export class PriceTable {
  readonly version: string;
  private readonly overrides = new Map<string, PricedModel>();
  private readonly overrideKeys: string[];
  private readonly cache = new Map<string, PricedModel | null>();

  constructor(
    overrides: Readonly<Record<string, PriceOverride>> = {},
    private readonly providers: readonly Provider[] = ["anthropic", "openai"],
  ) {
    for (const [name, p] of Object.entries(overrides)) this.overrides.set(name, this.fromConfig(name, p));
    this.overrideKeys = [...this.overrides.keys()].sort((a, b) => b.length - a.length);
    this.version =
      Object.keys(overrides).length > 0
        ? `${PRICE_DATA_VERSION}+cfg.${createHash("sha256").update(JSON.stringify(overrides)).digest("hex").slice(0, 10)}`
        : PRICE_DATA_VERSION;
  }

  /** A config price; cache rates it leaves out come from the data when it knows the model, else the wire's rule. */
  private fromConfig(name: string, p: PriceOverride): PricedModel {
    if (p.input === undefined || p.output === undefined)
      throw new EvalfleetError(
        ErrorCode.InvalidConfig,
        `price for '${name}' needs at least input and output`,
      );
    const known = findDataModel(name, p.provider ? [p.provider] : this.providers);
    const dataRates = known?.periods[0]?.rates;
    const input = flat(usdPerMtokToAttoPerToken(p.input));
    const given = (v: string | number | undefined): Rate | undefined =>
      v === undefined ? undefined : flat(usdPerMtokToAttoPerToken(v));
    // Anthropic bills cache writes at 1.25x (5 minutes) and 2x (1 hour) of input; OpenAI bills none. A cache read
    // left out is charged as input: over, never under.
    const anthropic = (p.provider ?? known?.provider) !== "openai";
    const times = (r: Rate, num: bigint, den: bigint): Rate => flat((r.base * num + den - 1n) / den);
    const cacheWrite5m =
      given(p.cacheWrite5m) ?? dataRates?.cacheWrite5m ?? (anthropic ? times(input, 5n, 4n) : input);
    const rates: Rates = {
      input,
      output: flat(usdPerMtokToAttoPerToken(p.output)),
      cacheRead: given(p.cacheRead) ?? dataRates?.cacheRead ?? input,
      cacheWrite5m,
      cacheWrite1h:
        given(p.cacheWrite1h) ?? dataRates?.cacheWrite1h ?? (anthropic ? times(input, 2n, 1n) : cacheWrite5m),
    };
    return {
      key: name,
      source: "config",
      provider: p.provider ?? known?.provider,
      contextWindow: known?.contextWindow,
      periods: [{ rates }],
    };
  }

  /**
   * The prices of `model`: a run-config entry (exact name, or the name of a dated snapshot of it:
   * `claude-sonnet-4-5-20250929` for `claude-sonnet-4-5`), else the data's model, else undefined.
   */
  lookup(model: string): PricedModel | undefined {
    const hit = this.cache.get(model);
    if (hit !== undefined) return hit ?? undefined;
    const m = model.replace(/^(anthropic|openai)[/:]/i, "");
    let found: PricedModel | undefined;
    const lower = m.toLowerCase();
    for (const k of this.overrideKeys) {
      const kl = k.toLowerCase();
      if (lower === kl || lower.startsWith(`${kl}-`) || lower.startsWith(`${kl}@`)) {
        found = this.overrides.get(k);
        break;
      }
    }
    if (!found) {
      const d: DataModel | undefined = m === "" ? undefined : findDataModel(m, this.providers);
      if (d)
        found = {
          key: d.id,
          source: "data",
          provider: d.provider,
          contextWindow: d.contextWindow,
          periods: d.periods,
        };
    }
    if (this.cache.size > 1024) this.cache.clear();
    this.cache.set(model, found ?? null);
    return found;
  }

  knows(model: string): boolean {
    return this.lookup(model) !== undefined;
  }

  private priced(model: string): PricedModel {
    const p = this.lookup(model);
    if (!p) throw unknownPrice(model);
    return p;
  }

  /** The rates in force for `model` at `atMs`. */
  ratesAt(model: string, atMs: number = Date.now()): Rates {
    return periodAt(this.priced(model).periods, atMs).rates;
  }

  /** A call's exact cost, priced at the rates in force when it started. Throws for a model with no price. */
  cost(model: string, usage: TokenUsage, atMs: number = Date.now()): Priced {
    const p = this.priced(model);
    return {
      costNanoUsd: Number(exactCostNanoUsd(periodAt(p.periods, atMs).rates, usage)),
      priceKey: p.key,
      known: true,
      priceVersion: this.version,
    };
  }

  /**
   * The fewest nano-USD a call can cost: `inputTokens` all at the cheapest input rate and one output token. Used
   * to refuse a call the remaining budget cannot pay for even at its smallest.
   */
  minCostNanoUsd(model: string, inputTokens: number, atMs: number = Date.now()): bigint {
    const r = this.ratesAt(model, atMs);
    let cheapestIn = rateAt(r.input, inputTokens);
    const read = rateAt(r.cacheRead, inputTokens);
    if (read < cheapestIn) cheapestIn = read;
    return (
      (BigInt(inputTokens) * cheapestIn + rateAt(r.output, inputTokens) + ATTO_PER_NANO - 1n) / ATTO_PER_NANO
    );
  }

  /**
   * How many output tokens `remainingNanoUsd` pays for after `inputTokens` at the full input rate (the worst case
   * for uncached input), rounded down.
   */
  affordableOutputTokens(
    model: string,
    inputTokens: number,
    remainingNanoUsd: bigint,
    atMs: number = Date.now(),
  ): number {
    const r = this.ratesAt(model, atMs);
    const out = rateAt(r.output, inputTokens);
    const left = remainingNanoUsd * ATTO_PER_NANO - BigInt(inputTokens) * rateAt(r.input, inputTokens);
    if (left <= 0n) return 0;
    if (out === 0n) return Number.MAX_SAFE_INTEGER;
    const n = left / out;
    return n > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(n);
  }

  /**
   * The most a call with at most `inputTokens` of input can cost: every input token at the highest input-side rate
   * the request can incur (cache writes only when it asks for them), every output token at the highest output rate,
   * each at the highest tier that input size reaches. Rounded up.
   */
  worstCaseNanoUsd(
    model: string,
    call: { inputTokens: number; outputTokens: number; cacheWrites: CacheWrites },
    atMs: number = Date.now(),
  ): bigint {
    const { inRate, outRate } = this.worstRates(model, call.inputTokens, call.cacheWrites, atMs);
    const atto = BigInt(call.inputTokens) * inRate + BigInt(call.outputTokens) * outRate;
    return (atto + ATTO_PER_NANO - 1n) / ATTO_PER_NANO;
  }

  /**
   * The highest rates a call with at most `inputTokens` of input can be billed at: tiers rise with input size, so
   * the tier at the bound is the highest any smaller input reaches.
   */
  private worstRates(
    model: string,
    inputTokens: number,
    cacheWrites: CacheWrites,
    atMs: number,
  ): { inRate: bigint; outRate: bigint } {
    const r = this.ratesAt(model, atMs);
    const at = (x: Rate) => {
      let m = 0n;
      for (const t of [x.base, ...x.tiers.filter((t) => inputTokens > t.start).map((t) => t.price)])
        if (t > m) m = t;
      return m;
    };
    let inRate = at(r.input);
    const consider = (x: Rate) => {
      const m = at(x);
      if (m > inRate) inRate = m;
    };
    consider(r.cacheRead);
    if (cacheWrites !== "none") consider(r.cacheWrite5m);
    if (cacheWrites === "1h") consider(r.cacheWrite1h);
    return { inRate, outRate: at(r.output) };
  }

  /**
   * The most output tokens `leftNanoUsd` pays for at worst-case rates after `inputTokens` at the highest input-side
   * rate (as worstCaseNanoUsd prices them), rounded down; 0 when the input alone does not fit.
   */
  affordableWorstOutput(
    model: string,
    inputTokens: number,
    cacheWrites: CacheWrites,
    leftNanoUsd: bigint,
    atMs: number = Date.now(),
  ): number {
    const inOnly = this.worstCaseNanoUsd(model, { inputTokens, outputTokens: 0, cacheWrites }, atMs);
    const out = this.worstRates(model, inputTokens, cacheWrites, atMs).outRate;
    // Exactly: (left − input) in atto over the output rate; the input's own rounding up is kept (safe side).
    const left = (leftNanoUsd - inOnly) * ATTO_PER_NANO;
    if (left <= 0n) return 0;
    if (out === 0n) return Number.MAX_SAFE_INTEGER;
    const n = left / out;
    return n > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(n);
  }

  /** The largest output a call to `model` can be billed for when its request sets no cap (its context window). */
  outputLimit(model: string): number | undefined {
    return this.lookup(model)?.contextWindow;
  }
}

/** The error for a model nothing prices, worded for the person who can fix it. */
export function unknownPrice(model: string): EvalfleetError {
  return new EvalfleetError(
    ErrorCode.UnknownPrice,
    `no price for model ${JSON.stringify(model)}: the pinned price data (${PRICE_DATA_VERSION}) does not know it; give it prices in the run's models (prices: { input_per_mtok, output_per_mtok, cache_read_per_mtok, cache_write_per_mtok })`,
  );
}
