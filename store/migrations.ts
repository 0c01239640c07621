import { type Logger, silentLogger } from "../lib/log.js";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import type { Db } from "./db.js";
import { migration001 } from "./migrations/001_results_core.js";
import { migration002 } from "./migrations/002_ledger_and_gateway.js";
import { migration003 } from "./migrations/003_ledger_pool_index.js";
import { migration004 } from "./migrations/004_money.js";
import { migration005 } from "./migrations/005_images.js";
import { migration006 } from "./migrations/006_security_events.js";
import { migration007 } from "./migrations/007_gateway_replicas.js";
import type { Migration } from "./migrations/types.js";

export type { Migration } from "./migrations/types.js";

/** Every migration, in order. Append only; a released migration is never edited. */
export const MIGRATIONS: readonly Migration[] = [
  migration001,
  migration002,
  migration003,
  migration004,
  migration005,
  migration006,
  migration007,
];

// pg_advisory_xact_lock key shared by every evalfleet migrator ("evalflt" as ASCII bytes).
const MIGRATION_LOCK_KEY = "28559133450333300";

export interface MigrateResult {
  /** Versions applied by this call (empty when the database was already current). */
  applied: number[];
  /** Highest version recorded afterwards. */
  version: number;
}

/**
 * Brings the database to the latest schema. All pending migrations run in ONE transaction together with their
 * schema_migrations rows, so a failure leaves the database exactly as it was. Concurrent migrators (N replicas
 * starting at once) queue on an advisory lock and the later ones find nothing to do. PGlite is a single session
 * already serialised by the Db queue, so it takes no lock.
 */
export async function migrate(
  db: Db,
  opts: { log?: Logger; migrations?: readonly Migration[] } = {},
): Promise<MigrateResult> {
  const log = opts.log ?? silentLogger();
  const migrations = [...(opts.migrations ?? MIGRATIONS)].sort((a, b) => a.version - b.version);
  try {
    return await db.transaction(async (tx) => {
      if (tx.kind === "postgres") await tx.query(`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK_KEY})`);
      await tx.query(
        `CREATE TABLE IF NOT EXISTS schema_migrations (
           version INTEGER PRIMARY KEY,
           name TEXT NOT NULL,
           applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
         )`,
      );
      const done = new Set(
        (await tx.query<{ version: number }>("SELECT version FROM schema_migrations")).rows.map(
          (r) => r.version,
        ),
      );
      const known = new Set(migrations.map((m) => m.version));
      const unknown = [...done].filter((v) => !known.has(v));
      if (unknown.length > 0) {
        log.warn(
          { versions: unknown },
          "database has migrations this build does not know (newer evalfleet?)",
        );
      }
      const applied: number[] = [];
      for (const m of migrations) {
        if (done.has(m.version)) continue;
        log.info({ version: m.version, name: m.name }, "applying migration");
        await m.up(tx, log);
        await tx.query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", [m.version, m.name]);
        applied.push(m.version);
      }
      const version = Math.max(0, ...done, ...applied);
      return { applied, version };
    });
  } catch (err) {
    if (err instanceof EvalfleetError) throw err;
    throw new EvalfleetError(
      ErrorCode.Migration,
      `migration failed and was rolled back: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
}
