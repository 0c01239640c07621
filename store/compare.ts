import { nanoToNumber } from "../protocol/money.js";
import type { Db } from "./db.js";
import { type AttemptRow, loadAttempts } from "./report.js";
import { getRunMetadata } from "./results.js";

/*
 * What `evalfleet compare` and the dashboard's comparison read of one run: every attempt row with the ledger's
 * spend on its cell (retried attempts included: money spent), the sandbox it ran in, and what the run ran under
 * (its stored config, evalfleet's version, its image, the price data's versions).
 */

/** One cell's latest attempt, as a comparison pairs it. */
export interface CompareRow extends AttemptRow {
  /** ledger spend on the cell, every attempt */
  costNanoUsd: number;
  sandbox: string | null;
}

/** What a run ran under, for warnings when compared cells differ. */
export interface RunEnvironment {
  run: string;
  /** the run config as stored by the planner (null for a run the database has no metadata of) */
  config: Record<string, unknown> | null;
  evalfleetVersion: string | null;
  dockerImage: string | null;
  priceVersions: string[];
}

export interface CompareInput {
  rows: CompareRow[];
  env: RunEnvironment;
}

export async function loadCompareInput(db: Db, run: string): Promise<CompareInput> {
  const [attempts, extra, meta, prices] = await Promise.all([
    loadAttempts(db, run),
    db.query<{ cell_id: string; sandbox: string | null; cost: string | null }>(
      `SELECT r.cell_id, (r.harness_metadata::jsonb)->>'sandbox' AS sandbox, l.cost
         FROM run_results r
         LEFT JOIN (SELECT cell_id, sum(cost_nano_usd)::text AS cost FROM ledger_calls
                     WHERE run_name = $1 GROUP BY cell_id) l ON l.cell_id = r.cell_id
        WHERE r.run_name = $1`,
      [run],
    ),
    getRunMetadata(db, run),
    db.query<{ v: string }>(
      "SELECT DISTINCT price_version AS v FROM ledger_calls WHERE run_name = $1 AND price_version IS NOT NULL ORDER BY 1",
      [run],
    ),
  ]);
  const byCell = new Map(extra.rows.map((x) => [x.cell_id, x]));
  let config: Record<string, unknown> | null = null;
  try {
    config = meta ? (JSON.parse(meta.configJson) as Record<string, unknown>) : null;
  } catch {
    config = null;
  }
  return {
    rows: attempts.map((a) => {
      const x = byCell.get(a.cellId);
      return {
        ...a,
        costNanoUsd: nanoToNumber(BigInt(x?.cost ?? "0")),
        sandbox: x?.sandbox ?? null,
      };
    }),
    env: {
      run,
      config,
      evalfleetVersion: meta?.version ?? null,
      dockerImage: meta?.dockerImage ?? null,
      priceVersions: prices.rows.map((p) => p.v),
    },
  };
}
