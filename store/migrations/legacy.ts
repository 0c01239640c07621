import type { Logger } from "../../lib/log.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import type { Db } from "../db.js";
import { type ColumnSpec, quote, type TableSpec } from "./types.js";

/*
 * In-place upgrade of a results database built the old way: run_results / run_state / reconciliation_results
 * keyed on cell_id alone, phase_results referencing run_results(cell_id), money as REAL, no cost_mode.
 * Tables are altered, never rebuilt, so every row keeps its identity (phase_results.id included). The caller
 * runs this inside the migrator's single transaction: any failure rolls the whole upgrade back.
 */

const KEYED = ["run_results", "run_state", "reconciliation_results"] as const;
const CHILDREN = ["run_state", "reconciliation_results", "phase_results"] as const;

interface LiveColumn {
  name: string;
  type: string;
  not_null: boolean;
  identity: string;
  default: string | null;
}

/** The old shape is recognised from the catalog, not guessed: run_results exists with PRIMARY KEY (cell_id). */
export async function isLegacyShape(tx: Db): Promise<boolean> {
  const pk = await primaryKey(tx, "run_results");
  return pk !== null && pk.columns.length === 1 && pk.columns[0] === "cell_id";
}

async function tableExists(tx: Db, table: string): Promise<boolean> {
  const r = await tx.query<{ oid: string | null }>("SELECT to_regclass($1)::text AS oid", [table]);
  return r.rows[0]?.oid != null;
}

async function primaryKey(tx: Db, table: string): Promise<{ name: string; columns: string[] } | null> {
  const r = await tx.query<{ name: string; columns: string[] }>(
    `SELECT c.conname::text AS name, array_agg(a.attname::text ORDER BY k.ord) AS columns
       FROM pg_constraint c
       CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
       JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
      WHERE c.conrelid = to_regclass($1) AND c.contype = 'p'
      GROUP BY c.conname`,
    [table],
  );
  return r.rows[0] ?? null;
}

export async function liveColumns(tx: Db, table: string): Promise<Map<string, LiveColumn>> {
  const r = await tx.query<LiveColumn>(
    `SELECT a.attname::text AS name, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
            a.attidentity::text AS identity, pg_get_expr(d.adbin, d.adrelid) AS default
       FROM pg_attribute a
       LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
      WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
      ORDER BY a.attnum`,
    [table],
  );
  return new Map(r.rows.map((c) => [c.name, c]));
}

async function count(tx: Db, sql: string): Promise<number> {
  const r = await tx.query<{ n: number }>(sql);
  return r.rows[0]?.n ?? 0;
}

export async function upgradeLegacy(tx: Db, specs: readonly TableSpec[], log: Logger): Promise<void> {
  // REAL -> NUMERIC goes through text; with extra_float_digits >= 1 a float prints as its shortest exact decimal
  // (0.1::real -> '0.1'), not the 6-digit rounding of a direct float4 -> numeric cast.
  await tx.query("SET LOCAL extra_float_digits = 1");

  // 1. Foreign keys pointing at a cell_id-only key must go before that key can be replaced.
  const fks = await tx.query<{ name: string; tbl: string }>(
    `SELECT conname::text AS name, conrelid::regclass::text AS tbl FROM pg_constraint
      WHERE contype = 'f' AND confrelid = ANY (ARRAY[to_regclass('run_results'), to_regclass('run_state'),
                                                    to_regclass('reconciliation_results')])`,
  );
  for (const fk of fks.rows) {
    if (fk.tbl !== "phase_results")
      log.warn({ table: fk.tbl, constraint: fk.name }, "dropping legacy foreign key");
    await tx.query(`ALTER TABLE ${fk.tbl} DROP CONSTRAINT ${quote(fk.name)}`);
  }

  // 2. Every child row learns its run from its parent (cell_id was unique in the old shape, so this is exact).
  for (const t of CHILDREN) {
    if (!(await tableExists(tx, t))) continue;
    await tx.query(`ALTER TABLE ${t} ADD COLUMN IF NOT EXISTS run_name TEXT`);
    await tx.query(
      `UPDATE ${t} AS c SET run_name = r.run_name FROM run_results r WHERE c.run_name IS NULL AND r.cell_id = c.cell_id`,
    );
  }
  for (const t of ["run_results", ...CHILDREN]) {
    if (!(await tableExists(tx, t))) continue;
    const orphans = await count(
      tx,
      `SELECT count(*) AS n FROM ${t} WHERE run_name IS NULL OR cell_id IS NULL`,
    );
    if (orphans > 0) {
      throw new EvalfleetError(
        ErrorCode.Migration,
        `${orphans} ${t} row(s) have no run_name and no run_results parent to take it from; set run_name and re-run`,
      );
    }
  }

  // 3. Re-key on (run_name, cell_id).
  for (const t of KEYED) {
    const pk = await primaryKey(tx, t);
    if (!pk || pk.columns.join(",") === "run_name,cell_id") continue;
    await tx.query(`ALTER TABLE ${t} DROP CONSTRAINT ${quote(pk.name)}`);
    await tx.query(`ALTER TABLE ${t} ADD CONSTRAINT ${t}_pkey PRIMARY KEY (run_name, cell_id)`);
  }

  // 4. phase_results.id becomes a BIGINT identity holding the same values, its sequence past the largest id.
  if (await tableExists(tx, "phase_results")) await keepPhaseIds(tx);

  // 5. Columns: same names, types, defaults and nullability as a fresh database.
  const added = new Map<string, string[]>();
  for (const spec of specs) {
    if (await tableExists(tx, spec.name)) added.set(spec.name, await conformColumns(tx, spec));
  }

  // 6. Backfills for columns the old shape did not have.
  if (added.get("run_results")?.includes("attempt")) {
    await tx.query("UPDATE run_results SET attempt = COALESCE(retry_count, 0)");
  }
  // Every pre-migration row is platform-billed (the seed's rule); a row written later without it stays NULL = billable.
  const backfilled = await tx.query("UPDATE run_results SET cost_mode = 'platform' WHERE cost_mode IS NULL");
  if (added.get("phase_results")?.includes("attempt")) {
    // Old runs re-inserted phases on retry; number repeats of a phase so (run, cell, attempt, phase) is unique.
    await tx.query(
      `UPDATE phase_results p SET attempt = d.n - 1
         FROM (SELECT id, row_number() OVER (PARTITION BY run_name, cell_id, phase_name ORDER BY id) AS n
                 FROM phase_results) d
        WHERE d.id = p.id AND d.n > 1`,
    );
  }

  // 7. The composite foreign key, validated against every existing row, then checked by query as well.
  if (await tableExists(tx, "phase_results")) {
    await tx.query(
      `ALTER TABLE phase_results ADD CONSTRAINT phase_results_run_cell_fkey
         FOREIGN KEY (run_name, cell_id) REFERENCES run_results (run_name, cell_id)`,
    );
    const missing = await count(
      tx,
      `SELECT count(*) AS n FROM phase_results p
        WHERE NOT EXISTS (SELECT 1 FROM run_results r WHERE r.run_name = p.run_name AND r.cell_id = p.cell_id)`,
    );
    if (missing > 0)
      throw new EvalfleetError(ErrorCode.Migration, `${missing} phase_results rows lost their parent`);
  }
  log.info({ costModeBackfilled: backfilled.rowCount }, "results store: legacy upgrade complete");
}

async function keepPhaseIds(tx: Db): Promise<void> {
  const id = (await liveColumns(tx, "phase_results")).get("id");
  if (!id) throw new EvalfleetError(ErrorCode.Migration, "legacy phase_results has no id column");
  if (id.identity === "") {
    const seq = await tx.query<{ seq: string | null }>(
      "SELECT pg_get_serial_sequence('phase_results', 'id') AS seq",
    );
    if (id.default !== null) await tx.query("ALTER TABLE phase_results ALTER COLUMN id DROP DEFAULT");
    const owned = seq.rows[0]?.seq;
    if (owned) await tx.query(`DROP SEQUENCE ${owned}`);
    if (id.type !== "bigint") await tx.query("ALTER TABLE phase_results ALTER COLUMN id TYPE BIGINT");
    await tx.query("ALTER TABLE phase_results ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY");
  }
  await tx.query(
    `SELECT setval(pg_get_serial_sequence('phase_results', 'id'), m) FROM (SELECT max(id) AS m FROM phase_results) x
      WHERE m >= 1`,
  );
}

/** Adds missing columns and converts types/defaults/nullability to the spec. Returns the columns it added. */
async function conformColumns(tx: Db, spec: TableSpec): Promise<string[]> {
  const live = await liveColumns(tx, spec.name);
  const added: string[] = [];
  const t = spec.name;
  for (const c of spec.columns) {
    const col = quote(c.name);
    const have = live.get(c.name);
    if (!have) {
      await tx.query(`ALTER TABLE ${t} ADD COLUMN ${columnDef(c)}`);
      added.push(c.name);
      continue;
    }
    if (c.identity) continue;
    if (have.type !== c.type) {
      // Via text: lossless for int -> bigint, and shortest-exact for real -> numeric / double precision.
      await tx.query(`ALTER TABLE ${t} ALTER COLUMN ${col} TYPE ${c.type} USING ${col}::text::${c.type}`);
    }
    if (c.default && have.default === null) {
      await tx.query(`ALTER TABLE ${t} ALTER COLUMN ${col} SET DEFAULT ${c.default}`);
    }
    if (c.notNull && !have.not_null) {
      if (c.default) await tx.query(`UPDATE ${t} SET ${col} = ${c.default} WHERE ${col} IS NULL`);
      await tx.query(`ALTER TABLE ${t} ALTER COLUMN ${col} SET NOT NULL`);
    }
  }
  return added;
}

function columnDef(c: ColumnSpec): string {
  return `${quote(c.name)} ${c.type.toUpperCase()}${c.default ? ` DEFAULT ${c.default}` : ""}${c.notNull ? " NOT NULL" : ""}`;
}
