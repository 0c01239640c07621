/** A run's price table: its models' config prices over the pinned data, and the check the planner makes with it. */
import type { ModelSpec, RunConfig } from "../protocol/config.js";
import type { Issue } from "../protocol/errors.js";
import { PRICE_DATA_VERSION, type PriceOverride, PriceTable } from "./pricing.js";

/** The model id a harness sends for `m`: the gateway alias, else the name. */
export function wireModelId(m: ModelSpec): string {
  return m.alias ?? m.name;
}

function overrideOf(m: ModelSpec): PriceOverride | undefined {
  const p = m.prices;
  if (!p) return undefined;
  return {
    provider: m.provider,
    input: p.input_per_mtok,
    output: p.output_per_mtok,
    ...(p.cache_read_per_mtok !== undefined ? { cacheRead: p.cache_read_per_mtok } : {}),
    ...(p.cache_write_per_mtok !== undefined ? { cacheWrite5m: p.cache_write_per_mtok } : {}),
    ...(p.cache_write_1h_per_mtok !== undefined ? { cacheWrite1h: p.cache_write_1h_per_mtok } : {}),
  };
}

/**
 * The run's prices: a model with `prices` in the config is priced by them (under its name and the id it is sent
 * as), every other model by the pinned data. `aliases` maps a wire id to the model name it stands for.
 */
export function runPriceTable(models: readonly ModelSpec[]): {
  prices: PriceTable;
  aliases: Record<string, string>;
} {
  const overrides: Record<string, PriceOverride> = {};
  const aliases: Record<string, string> = {};
  for (const m of models) {
    if (m.alias && m.alias !== m.name) aliases[m.alias] = m.name;
    const o = overrideOf(m);
    if (!o) continue;
    overrides[m.name] = o;
    if (m.alias && m.alias !== m.name) overrides[m.alias] = o;
  }
  return { prices: new PriceTable(overrides), aliases };
}

/** Config prices for one model alone (the judge prices its own calls with these). */
export function modelPriceTable(m: ModelSpec): PriceTable {
  return runPriceTable([m]).prices;
}

/**
 * The planner's check: every model of the run is priced, by the config or by the pinned data. A model neither
 * knows is refused here, before anything runs, instead of being priced by a guess at call time.
 */
export function unpricedModels(config: Pick<RunConfig, "models">): Issue[] {
  let prices: PriceTable;
  try {
    prices = runPriceTable(config.models).prices;
  } catch (err) {
    // A config price evalfleet cannot hold exactly (more than 12 decimals).
    return [{ path: "models", reason: err instanceof Error ? err.message : String(err) }];
  }
  const issues: Issue[] = [];
  config.models.forEach((m, i) => {
    if (m.prices || prices.knows(wireModelId(m))) return;
    issues.push({
      path: `models.${i}.prices`,
      reason: `no price for model ${JSON.stringify(wireModelId(m))}: the pinned price data (${PRICE_DATA_VERSION}) does not know it; add prices: { input_per_mtok, output_per_mtok, cache_read_per_mtok, cache_write_per_mtok } (USD per million tokens, from the provider's price page)`,
    });
  });
  return issues;
}
