/**
 * How the scripted provider bills: from its own price sheet (price-sheet.json, the providers' published list
 * prices), with arithmetic of its own. Nothing here is shared with providers/pricing.ts, so a ledger that equals this
 * bill checks evalfleet's prices, not only its token counts. Each call is billed rounded up to the nano-USD, the
 * granularity the ledger keeps.
 */
import { readFileSync } from "node:fs";
import type { TokenUsage } from "../providers/types.js";

/** One sheet entry: USD per million tokens as decimal text. */
export interface SheetRates {
  input: string;
  output: string;
  cache_read?: string;
  cache_write_5m?: string;
  cache_write_1h?: string;
}

export interface SheetEntry extends SheetRates {
  /** rates for a call whose total input passes 200,000 tokens */
  above_200k?: SheetRates;
}

export interface PriceSheet {
  version: string;
  models: Record<string, SheetEntry>;
}

/** The published sheet the provider bills from by default. */
export function publishedSheet(): PriceSheet {
  const raw = JSON.parse(readFileSync(new URL("./price-sheet.json", import.meta.url), "utf8")) as PriceSheet;
  return { version: raw.version, models: raw.models };
}

/** "6.25" → [625n, 2]: the digits and how many of them are decimals. */
function decimal(text: string): [bigint, number] {
  const m = /^(\d+)(?:\.(\d+))?$/.exec(text);
  if (!m) throw new Error(`price sheet: '${text}' is not a decimal`);
  return [BigInt(`${m[1]}${m[2] ?? ""}`), (m[2] ?? "").length];
}

const SCALE = 15; // sums kept in 10^-(6+15) USD: every sheet price has at most 15 decimals

/** tokens × USD-per-Mtok, in units of 10^-21 USD. */
function times(tokens: number, price: string): bigint {
  const [digits, decimals] = decimal(price);
  return BigInt(tokens) * digits * 10n ** BigInt(SCALE - decimals);
}

/** The entry billing `model`: its own, or the entry it is a dated snapshot of (`claude-haiku-4-5-20251001`). */
export function sheetEntry(sheet: PriceSheet, model: string): SheetEntry | undefined {
  if (Object.hasOwn(sheet.models, model)) return sheet.models[model];
  const undated = /^(.*)-\d{8}$/.exec(model)?.[1];
  return undated && Object.hasOwn(sheet.models, undated) ? sheet.models[undated] : undefined;
}

/** What one call costs on the sheet, in nano-USD rounded up. */
export function billNanoUsd(entry: SheetEntry, u: TokenUsage): number {
  const r: SheetRates = u.inputTokens > 200_000 && entry.above_200k ? entry.above_200k : entry;
  const oneHour = Math.min(u.cacheWrite1hTokens, u.cacheWriteTokens);
  const fiveMin = u.cacheWriteTokens - oneHour;
  const plain = Math.max(0, u.inputTokens - u.cacheReadTokens - u.cacheWriteTokens);
  const total =
    times(plain, r.input) +
    times(u.cacheReadTokens, r.cache_read ?? r.input) +
    times(fiveMin, r.cache_write_5m ?? r.input) +
    times(oneHour, r.cache_write_1h ?? r.cache_write_5m ?? r.input) +
    times(u.outputTokens, r.output);
  // 10^-21 USD → nano-USD (10^-9): divide by 10^12, rounding up.
  const unit = 10n ** 12n;
  return Number((total + unit - 1n) / unit);
}
