import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { EvalfleetError } from "../../protocol/errors.js";
import type { Db } from "../../store/db.js";
import { MIGRATIONS, migrate } from "../../store/migrations.js";
import {
  getBillableCost,
  getTotalCost,
  insertPhaseResults,
  upsertAttemptResults,
} from "../../store/results.js";
import { type FreshDb, freshDb } from "../helpers/db.js";

/*
 * A results database built the old way — every table keyed on cell_id alone, phase_results pointing at
 * run_results(cell_id) with no run_name of its own, money as REAL, no cost_mode, a SERIAL id whose sequence lags
 * behind explicitly written ids — migrated in place, then checked row by row.
 */
const LEGACY_DDL = [
  `CREATE TABLE run_results (
     cell_id TEXT PRIMARY KEY, run_name TEXT, harness TEXT, model TEXT, task_id TEXT, track TEXT, repeat INTEGER,
     exit_class TEXT, success REAL, error_class TEXT, error_message TEXT, input_tokens INTEGER, output_tokens INTEGER,
     cache_read_tokens INTEGER, cache_write_tokens INTEGER, reasoning_tokens INTEGER, total_cost REAL, latency_ms REAL,
     time_to_first_attempt_ms REAL, num_api_calls INTEGER, num_tool_calls INTEGER, diff TEXT, test_output TEXT,
     harness_metadata TEXT, harness_stdout TEXT, harness_stderr TEXT, timestamp TEXT, retry_count INTEGER)`,
  `CREATE TABLE run_state (cell_id TEXT PRIMARY KEY, run_name TEXT, status TEXT, started_at TEXT, completed_at TEXT,
     error TEXT)`,
  `CREATE TABLE run_metadata (run_name TEXT PRIMARY KEY, config_json TEXT, harness_evaluator_version TEXT,
     docker_image TEXT, created_at TEXT)`,
  `CREATE TABLE phase_results (id SERIAL PRIMARY KEY, cell_id TEXT REFERENCES run_results(cell_id), phase_name TEXT,
     trace_id TEXT, model TEXT, model_role TEXT, exit_code INTEGER, duration_ms REAL, timed_out INTEGER,
     input_tokens INTEGER, output_tokens INTEGER, total_cost REAL, num_api_calls INTEGER, error TEXT, stdout TEXT,
     stderr TEXT, timestamp TEXT)`,
  `CREATE TABLE reconciliation_results (cell_id TEXT PRIMARY KEY, run_name TEXT, ledger_nano_usd BIGINT,
     gateway_nano_usd BIGINT, harness_reported_nano_usd BIGINT, difference_nano_usd BIGINT, flagged BOOLEAN,
     created_at TIMESTAMPTZ DEFAULT now())`,
];

const A = "opencode__claude-sonnet-5__swe-bugfix-001__r0";
const B = "opencode__claude-sonnet-5__swe-bugfix-001__r1";
const M = "aider__gpt-x__mp-001__r0__rev-claude-sonnet-5";
const OTHER = "aider__gpt-x__swe-bugfix-002__r0";

// [cell_id, run_name, total_cost REAL, input_tokens, success]
const LEGACY_RESULTS: [string, string, number, number, number][] = [
  [A, "alpha", 0.1, 1200, 1],
  [B, "alpha", 1.2345678, 2_000_000_000, 0.5],
  [M, "alpha", 0.000123, 50, 0],
  [OTHER, "beta", 3.5, 7, 1],
];
// [id, cell_id, phase_name, total_cost] — ids with gaps, written explicitly so the SERIAL sequence lags at 1.
const LEGACY_PHASES: [number, string, string, number][] = [
  [5, M, "implement", 0.0001],
  [9, M, "review", 0.000023],
  [42, M, "implement", 0.25], // the same phase again: a retry in the old runner
];

async function buildLegacy(db: Db): Promise<void> {
  for (const sql of LEGACY_DDL) await db.query(sql);
  for (const [cell, run, cost, inTok, success] of LEGACY_RESULTS) {
    await db.query(
      `INSERT INTO run_results (cell_id, run_name, harness, model, task_id, track, repeat, exit_class, success,
         input_tokens, total_cost, latency_ms, harness_metadata, timestamp, retry_count)
       VALUES ($1, $2, 'h', 'm', 't', 'swe', 0, 'pass', $5, $4, $3, 1234.5, '{"tier":1}', '2024-01-01T00:00:00Z', 1)`,
      [cell, run, cost, inTok, success],
    );
    await db.query(
      "INSERT INTO run_state (cell_id, run_name, status, completed_at) VALUES ($1, $2, 'completed', '2024-01-01')",
      [cell, run],
    );
  }
  for (const [id, cell, phase, cost] of LEGACY_PHASES) {
    await db.query(
      `INSERT INTO phase_results (id, cell_id, phase_name, trace_id, model, total_cost, timed_out)
       VALUES ($1, $2, $3, $2 || '__phase-' || $3, 'm', $4, 0)`,
      [id, cell, phase, cost],
    );
  }
  await db.query(
    `INSERT INTO reconciliation_results (cell_id, run_name, ledger_nano_usd, gateway_nano_usd, difference_nano_usd,
       flagged) VALUES ($1, 'alpha', 100000000, 100000100, 100, false)`,
    [A],
  );
  await db.query(
    "INSERT INTO run_metadata VALUES ('alpha', '{}', '0.9.0', 'img:1', '2024-01-01'), ('beta', '{}', '0.9.0', 'img:1', '2024-01-01')",
  );
}

type Shape = { table: string; name: string; type: string; nullable: boolean; def: string | null }[];
async function shape(db: Db): Promise<Shape> {
  const r = await db.query<Shape[number]>(
    `SELECT c.relname::text AS table, a.attname::text AS name, format_type(a.atttypid, a.atttypmod) AS type,
            NOT a.attnotnull AS nullable, COALESCE(pg_get_expr(d.adbin, d.adrelid), a.attidentity::text) AS def
       FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
       LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
      WHERE c.relname IN ('run_results','run_state','run_metadata','phase_results','reconciliation_results')
        AND c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace
        AND a.attnum > 0 AND NOT a.attisdropped
      ORDER BY 1, 2`,
  );
  return r.rows;
}

async function constraints(db: Db): Promise<string[]> {
  const r = await db.query<{ d: string }>(
    `SELECT conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) AS d FROM pg_constraint
      WHERE conrelid IN ('run_results'::regclass, 'run_state'::regclass, 'phase_results'::regclass,
                         'reconciliation_results'::regclass, 'run_metadata'::regclass) AND contype IN ('p', 'f', 'u')
      ORDER BY 1`,
  );
  return r.rows.map((x) => x.d);
}

describe(`legacy in-place migration (${process.env.DATABASE_URL ? "postgres" : "pglite"})`, () => {
  let f: FreshDb;
  let db: Db;
  before(async () => {
    f = await freshDb("store-legacy", { migrate: false });
    db = f.db;
    await buildLegacy(db);
  });
  after(async () => {
    await f?.cleanup();
  });

  test("a legacy row without a run and without a parent aborts the whole migration, changing nothing", async () => {
    await db.query("INSERT INTO run_results (cell_id, run_name) VALUES ('orphan-cell', NULL)");
    await assert.rejects(
      migrate(db),
      (err: unknown) => err instanceof EvalfleetError && err.code === "EF_MIGRATION",
    );
    const pk = await db.query<{ d: string }>(
      "SELECT pg_get_constraintdef(oid) AS d FROM pg_constraint WHERE conrelid = 'run_results'::regclass AND contype = 'p'",
    );
    assert.equal(pk.rows[0]?.d, "PRIMARY KEY (cell_id)");
    const sm = await db.query<{ t: string | null }>("SELECT to_regclass('schema_migrations')::text AS t");
    assert.equal(sm.rows[0]?.t, null);
    await db.query("DELETE FROM run_results WHERE cell_id = 'orphan-cell'");
  });

  test("migrates in place: keys, rows, ids, foreign keys, money, cost_mode", async () => {
    const before = await db.query<{ cell_id: string; run_name: string; ctid: string }>(
      "SELECT cell_id, run_name FROM run_results ORDER BY cell_id",
    );
    const res = await migrate(db);
    assert.deepEqual(
      res.applied,
      MIGRATIONS.map((m) => m.version),
    );

    // Composite keys and the composite foreign key.
    const cons = await constraints(db);
    for (const t of ["run_results", "run_state", "reconciliation_results"]) {
      assert.ok(cons.includes(`${t} ${t}_pkey PRIMARY KEY (run_name, cell_id)`), `${t}: ${cons.join("\n")}`);
    }
    assert.ok(
      cons.includes(
        "phase_results phase_results_run_cell_fkey FOREIGN KEY (run_name, cell_id) REFERENCES run_results(run_name, cell_id)",
      ),
      cons.join("\n"),
    );

    // Every row kept, same identity.
    const after = await db.query<{ cell_id: string; run_name: string }>(
      "SELECT cell_id, run_name FROM run_results ORDER BY cell_id",
    );
    assert.deepEqual(after.rows, before.rows);
    const rs = await db.query<{ n: number }>(
      "SELECT count(*) AS n FROM run_state WHERE status = 'completed'",
    );
    assert.equal(rs.rows[0]?.n, LEGACY_RESULTS.length);

    // Money: REAL -> NUMERIC(20,9) via the shortest exact decimal, never the float's noise digits.
    const money = await db.query<{
      cell_id: string;
      total_cost: string;
      input_tokens: number;
      success: number;
    }>("SELECT cell_id, total_cost, input_tokens, success FROM run_results ORDER BY cell_id");
    const byCell = new Map(money.rows.map((r) => [r.cell_id, r]));
    assert.equal(byCell.get(A)?.total_cost, "0.100000000");
    assert.equal(byCell.get(B)?.total_cost, "1.234567800");
    assert.equal(byCell.get(M)?.total_cost, "0.000123000");
    assert.equal(byCell.get(OTHER)?.total_cost, "3.500000000");
    assert.equal(byCell.get(B)?.input_tokens, 2_000_000_000);
    assert.equal(byCell.get(B)?.success, 0.5);

    // Every pre-migration row is platform-billed; attempt comes from retry_count.
    const modes = await db.query<{ cost_mode: string | null; attempt: number; n: number }>(
      "SELECT cost_mode, attempt, count(*) AS n FROM run_results GROUP BY 1, 2",
    );
    assert.deepEqual(modes.rows, [{ cost_mode: "platform", attempt: 1, n: LEGACY_RESULTS.length }]);

    // phase_results: same ids, run_name learnt from the parent, every row has its parent, repeats numbered.
    const phases = await db.query<{
      id: number;
      run_name: string;
      attempt: number;
      phase_name: string;
      total_cost: string;
    }>("SELECT id, run_name, attempt, phase_name, total_cost FROM phase_results ORDER BY id");
    assert.deepEqual(phases.rows, [
      { id: 5, run_name: "alpha", attempt: 0, phase_name: "implement", total_cost: "0.000100000" },
      { id: 9, run_name: "alpha", attempt: 0, phase_name: "review", total_cost: "0.000023000" },
      { id: 42, run_name: "alpha", attempt: 1, phase_name: "implement", total_cost: "0.250000000" },
    ]);
    const orphans = await db.query<{ n: number }>(
      `SELECT count(*) AS n FROM phase_results p
        WHERE NOT EXISTS (SELECT 1 FROM run_results r WHERE r.run_name = p.run_name AND r.cell_id = p.cell_id)`,
    );
    assert.equal(orphans.rows[0]?.n, 0);

    const rec = await db.query<{ run_name: string; ledger_nano_usd: number; difference_nano_usd: number }>(
      "SELECT run_name, ledger_nano_usd, difference_nano_usd FROM reconciliation_results WHERE cell_id = $1",
      [A],
    );
    assert.deepEqual(rec.rows, [{ run_name: "alpha", ledger_nano_usd: 100000000, difference_nano_usd: 100 }]);

    assert.equal(await getTotalCost(db, "alpha"), 1_334_690_800);
    assert.equal(await getBillableCost(db, "alpha"), 1_334_690_800);
  });

  test("the migrated schema is exactly a fresh database's schema", async () => {
    const fresh = await freshDb("store-legacy-fresh");
    try {
      assert.deepEqual(await shape(db), await shape(fresh.db));
      assert.deepEqual(await constraints(db), await constraints(fresh.db));
      const indexes = (d: Db) =>
        d.query<{ indexdef: string }>(
          "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() ORDER BY indexname",
        );
      assert.deepEqual((await indexes(db)).rows, (await indexes(fresh.db)).rows);
      assert.ok((await shape(db)).length > 60);
    } finally {
      await fresh.cleanup();
    }
  });

  test("identity continues past the largest preserved id", async () => {
    await insertPhaseResults(db, [{ runName: "alpha", cellId: M, attempt: 2, phaseName: "implement" }]);
    const r = await db.query<{ id: number }>("SELECT max(id) AS id FROM phase_results");
    assert.equal(r.rows[0]?.id, 43);
  });

  test("a second run can now share a cell_id without overwriting the first", async () => {
    await upsertAttemptResults(db, [
      {
        runName: "gamma",
        cellId: A,
        attempt: 0,
        totalCostNanoUsd: 7,
        costMode: "subscription",
        harness: "h2",
      },
    ]);
    await insertPhaseResults(db, [{ runName: "gamma", cellId: A, attempt: 0, phaseName: "implement" }]);
    const rows = await db.query<{ run_name: string; total_cost: string; harness: string }>(
      "SELECT run_name, total_cost, harness FROM run_results WHERE cell_id = $1 ORDER BY run_name",
      [A],
    );
    assert.deepEqual(rows.rows, [
      { run_name: "alpha", total_cost: "0.100000000", harness: "h" },
      { run_name: "gamma", total_cost: "0.000000007", harness: "h2" },
    ]);
    assert.equal(await getBillableCost(db, "gamma"), 0);
    assert.equal(await getTotalCost(db, "gamma"), 7);
  });

  test("re-running the migrator on the migrated database does nothing", async () => {
    const again = await migrate(db);
    assert.deepEqual(again.applied, []);
    const n = await db.query<{ n: number }>("SELECT count(*) AS n FROM phase_results");
    assert.equal(n.rows[0]?.n, 5);
  });
});
