import type { ProviderUpstreams } from "../config/index.js";
import type { RunConfig } from "../protocol/config.js";
import { wireModelId } from "../providers/run-prices.js";
import type { Db } from "../store/db.js";
import { listRunConfigJson } from "../store/results.js";
import type { AliasDef } from "./server.js";

/**
 * Aliases made per run: a run's model names (or their `alias`) resolve to that model's provider upstream, whose
 * key only the gateway holds. Looked up in run_metadata (newest run first) and cached; an alias no run names, or
 * whose provider has no key here, is unknown (403). Used by every gateway replica and by the local launcher.
 */
export function runAliasResolver(
  db: Db,
  upstreams: ProviderUpstreams,
): (alias: string) => Promise<AliasDef | undefined> {
  const cache = new Map<string, AliasDef>();
  return async (alias) => {
    const hit = cache.get(alias);
    if (hit) return hit;
    for (const json of await listRunConfigJson(db)) {
      const cfg = JSON.parse(json) as RunConfig;
      const model = cfg.models.find((m) => wireModelId(m) === alias);
      const upstream = model ? upstreams[model.provider] : undefined;
      if (model && upstream) {
        // Paced in the model's pool, the one the planner sizes the fleet by (the provider limits per key and model).
        const def: AliasDef = { upstream, model: wireModelId(model), pool: wireModelId(model) };
        cache.set(alias, def);
        return def;
      }
    }
    return undefined;
  };
}
