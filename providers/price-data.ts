/**
 * The maintained price data evalfleet prices calls from: `@pydantic/genai-prices`, pinned to one exact version in
 * package.json and read from its bundled copy only (its `updatePrices` auto-update is never called, so nothing is
 * fetched at run time and a run is priced by exactly the data its ledger rows name). The library matches a model id
 * to a model the way its maintainers define (its own match rules, dated-snapshot normalisation); the prices it holds
 * (JS numbers in USD per million tokens, flat, tiered by input size, or dated) are converted here, once per model, to
 * exact integers — atto-USD per token — so no float ever touches a cost.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { calcPrice, type ModelPrice as DataPrice, type ModelInfo } from "@pydantic/genai-prices";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import type { Provider } from "./types.js";

/** The package and exact version of the bundled data, as every ledger row records it. */
export const PRICE_DATA_VERSION = `genai-prices@${dataPackageVersion()}`;

function dataPackageVersion(): string {
  const require = createRequire(import.meta.url);
  const main = require.resolve("@pydantic/genai-prices");
  const pkgPath = `${main.slice(0, main.lastIndexOf("/dist/"))}/package.json`;
  return (JSON.parse(readFileSync(pkgPath, "utf8")) as { version: string }).version;
}

/** A per-token rate in atto-USD, flat or by input size: the rate of the last tier whose start the input passes. */
export interface Rate {
  base: bigint;
  /** ascending by start (input tokens): above `start` the whole call is priced at `price` */
  tiers: ReadonlyArray<{ start: number; price: bigint }>;
}

/** The five text rates a call is priced with; absent cache rates fall back as the data defines (to the parent). */
export interface Rates {
  input: Rate;
  output: Rate;
  cacheRead: Rate;
  cacheWrite5m: Rate;
  cacheWrite1h: Rate;
}

/** A period of a model's prices: from a start date on, or at a time of day (UTC seconds), or always. */
export interface RatePeriod {
  startMs?: number;
  timeOfDay?: { startS: number; endS: number };
  rates: Rates;
}

/** A model as the data knows it, with its prices exact. */
export interface DataModel {
  provider: Provider;
  /** the data's own model id (e.g. claude-opus-4-8 for claude-opus-4-8-20260101) */
  id: string;
  name: string | undefined;
  contextWindow: number | undefined;
  /** the last period whose constraint holds applies (the data's rule); the first has none */
  periods: readonly RatePeriod[];
}

const ATTO_PER_USD_PER_MTOK = 12; // USD/Mtok × 10^12 = atto-USD per token

/**
 * A non-negative decimal (string, or a number through its shortest round-trip text) of USD per million tokens as
 * atto-USD per token, exactly. At most 12 decimals: a finer price is not a price anyone publishes.
 */
export function usdPerMtokToAttoPerToken(v: string | number): bigint {
  const s = typeof v === "number" ? numberToDecimal(v) : v.trim();
  const m = /^(\d+)(?:\.(\d+))?$/.exec(s);
  if (!m)
    throw new EvalfleetError(ErrorCode.InvalidConfig, `price '${String(v)}' is not a non-negative decimal`);
  const frac = m[2] ?? "";
  if (frac.length > ATTO_PER_USD_PER_MTOK)
    throw new EvalfleetError(
      ErrorCode.InvalidConfig,
      `price '${s}' has more than ${ATTO_PER_USD_PER_MTOK} decimals`,
    );
  return (
    BigInt(m[1] ?? "0") * 10n ** BigInt(ATTO_PER_USD_PER_MTOK) +
    BigInt(frac.padEnd(ATTO_PER_USD_PER_MTOK, "0") || "0")
  );
}

function numberToDecimal(n: number): string {
  if (!Number.isFinite(n) || n < 0) return String(n);
  // toString is the shortest text that round-trips; expand exponents so 1e-7 parses.
  const s = String(n);
  return s.includes("e") ? n.toFixed(ATTO_PER_USD_PER_MTOK).replace(/0+$/, "").replace(/\.$/, "") : s;
}

export function flat(atto: bigint): Rate {
  return { base: atto, tiers: [] };
}

function rateOf(v: DataPrice[string]): Rate | undefined {
  if (v === undefined) return undefined;
  if (typeof v === "number") return flat(usdPerMtokToAttoPerToken(v));
  return {
    base: usdPerMtokToAttoPerToken(v.base),
    tiers: [...v.tiers]
      .sort((a, b) => a.start - b.start)
      .map((t) => ({ start: t.start, price: usdPerMtokToAttoPerToken(t.price) })),
  };
}

/** The data's prices as exact rates: cache rates it does not list are priced as their parent unit (input). */
function ratesOf(p: DataPrice): Rates {
  const input = rateOf(p.input_mtok) ?? flat(0n);
  const cacheWrite5m = rateOf(p.cache_write_mtok) ?? input;
  return {
    input,
    output: rateOf(p.output_mtok) ?? flat(0n),
    cacheRead: rateOf(p.cache_read_mtok) ?? input,
    cacheWrite5m,
    cacheWrite1h: rateOf(p.cache_write_1h_mtok) ?? cacheWrite5m,
  };
}

function secondsOfDay(t: string): number {
  const m = /^(\d{2}):(\d{2})(?::(\d{2}))?/.exec(t);
  return m ? Number(m[1]) * 3600 + Number(m[2]) * 60 + Number(m[3] ?? 0) : 0;
}

function periodsOf(info: ModelInfo): RatePeriod[] {
  if (!Array.isArray(info.prices)) return [{ rates: ratesOf(info.prices) }];
  return info.prices.map((c) => {
    const rates = ratesOf(c.prices);
    const k = c.constraint;
    if (k?.type === "start_date") return { startMs: Date.parse(`${k.start_date}T00:00:00Z`), rates };
    if (k?.type === "time_of_date")
      return { timeOfDay: { startS: secondsOfDay(k.start_time), endS: secondsOfDay(k.end_time) }, rates };
    return { rates };
  });
}

const byInfo = new WeakMap<ModelInfo, DataModel>();
const lookups = new Map<string, DataModel | null>();

/**
 * The model the data prices `modelId` as, searched in the given providers in order (the call's wire first), or
 * undefined when the data does not know it. There is no family or catch-all fallback: an unknown model is unknown.
 */
export function findDataModel(modelId: string, providers: readonly Provider[]): DataModel | undefined {
  const key = `${providers.join(",")}|${modelId}`;
  const hit = lookups.get(key);
  if (hit !== undefined) return hit ?? undefined;
  let found: DataModel | undefined;
  const id = modelId.replace(/^(anthropic|openai)[/:]/i, "");
  for (const provider of providers) {
    // Matching only: the usage is empty, the library's float total is never used.
    const r = id === "" ? null : calcPrice({ input_tokens: 0 }, id, { providerId: provider });
    if (!r) continue;
    found = byInfo.get(r.model);
    if (!found) {
      found = {
        provider,
        id: r.model.id,
        name: r.model.name,
        contextWindow: r.model.context_window,
        periods: periodsOf(r.model),
      };
      byInfo.set(r.model, found);
    }
    break;
  }
  if (lookups.size > 4096) lookups.clear();
  lookups.set(key, found ?? null);
  return found;
}

/** The period in force at `atMs`: the last one whose constraint holds, else the first (the data's rule). */
export function periodAt(periods: readonly RatePeriod[], atMs: number): RatePeriod {
  for (let i = periods.length - 1; i >= 0; i--) {
    const p = periods[i]!;
    if (p.startMs === undefined && p.timeOfDay === undefined) return p;
    if (p.startMs !== undefined && atMs >= p.startMs) return p;
    if (p.timeOfDay) {
      const d = new Date(atMs);
      const s = d.getUTCHours() * 3600 + d.getUTCMinutes() * 60 + d.getUTCSeconds();
      const { startS, endS } = p.timeOfDay;
      if (endS < startS ? s >= startS || s < endS : s >= startS && s < endS) return p;
    }
  }
  return periods[0]!;
}

/** A rate at a call's total input size. */
export function rateAt(r: Rate, inputTokens: number): bigint {
  let price = r.base;
  for (const t of r.tiers) if (inputTokens > t.start) price = t.price;
  return price;
}

/** The highest a rate can be, whatever the input size. */
export function maxRate(r: Rate): bigint {
  let m = r.base;
  for (const t of r.tiers) if (t.price > m) m = t.price;
  return m;
}
