import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { EvalfleetError, RetryableError } from "../../protocol/errors.js";
import { type Db, isTransientDbError, openDb } from "../../store/db.js";
import { MIGRATIONS, migrate } from "../../store/migrations.js";
import { freshDb } from "../helpers/db.js";
import { forSuite } from "../helpers/suite.js";

const SEED_RUN_RESULTS = [
  "cell_id",
  "run_name",
  "harness",
  "model",
  "task_id",
  "track",
  "repeat",
  "exit_class",
  "success",
  "error_class",
  "error_message",
  "input_tokens",
  "output_tokens",
  "cache_read_tokens",
  "cache_write_tokens",
  "reasoning_tokens",
  "total_cost",
  "latency_ms",
  "time_to_first_attempt_ms",
  "num_api_calls",
  "num_tool_calls",
  "diff",
  "test_output",
  "harness_metadata",
  "harness_stdout",
  "harness_stderr",
  "timestamp",
  "retry_count",
  "cost_mode",
];
const EXTRA_RUN_RESULTS = [
  "attempt",
  "status",
  "trace_id",
  "review_model",
  "billable_cost",
  "patch_hash",
  "patch_ref",
  "trajectory_ref",
  "grade_status",
  "resolved",
  "grade_report",
  "graded_at",
  "verdict_score",
  "verdict",
];

async function columns(db: Db, table: string): Promise<{ name: string; type: string; nullable: boolean }[]> {
  const r = await db.query<{ name: string; type: string; nullable: boolean }>(
    `SELECT a.attname::text AS name, format_type(a.atttypid, a.atttypmod) AS type, NOT a.attnotnull AS nullable
       FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
      ORDER BY a.attnum`,
    [table],
  );
  return r.rows;
}

async function primaryKey(db: Db, table: string): Promise<string[]> {
  const r = await db.query<{ cols: string[] }>(
    `SELECT array_agg(a.attname::text ORDER BY k.ord) AS cols FROM pg_constraint c
       CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY k(attnum, ord)
       JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
      WHERE c.conrelid = to_regclass($1) AND c.contype = 'p'`,
    [table],
  );
  return r.rows[0]?.cols ?? [];
}

describe(`store migrations (${process.env.DATABASE_URL ? "postgres" : "pglite"})`, () => {
  const f = forSuite(
    () => freshDb("store-migrations", { migrate: false }),
    (db) => db.cleanup(),
  );

  test("fresh database migrates to the seed's schema", async () => {
    const res = await migrate(f().db);
    assert.deepEqual(
      res.applied,
      MIGRATIONS.map((m) => m.version),
    );
    const rr = await columns(f().db, "run_results");
    assert.deepEqual(
      rr.map((c) => c.name),
      [...SEED_RUN_RESULTS, ...EXTRA_RUN_RESULTS],
    );
    const byName = new Map(rr.map((c) => [c.name, c]));
    assert.equal(byName.get("total_cost")?.type, "numeric(20,9)");
    assert.equal(byName.get("billable_cost")?.type, "numeric(20,9)");
    assert.equal(byName.get("cost_mode")?.type, "text");
    assert.equal(byName.get("cost_mode")?.nullable, true);
    assert.equal(byName.get("attempt")?.nullable, false);
    for (const t of ["run_results", "run_state", "reconciliation_results"]) {
      assert.deepEqual(await primaryKey(f().db, t), ["run_name", "cell_id"], t);
    }
    assert.deepEqual(await primaryKey(f().db, "phase_results"), ["id"]);
    assert.deepEqual(await primaryKey(f().db, "run_metadata"), ["run_name"]);
    assert.deepEqual(await primaryKey(f().db, "ledger_calls"), ["call_id"]);
    const pr = new Map((await columns(f().db, "phase_results")).map((c) => [c.name, c.type]));
    assert.equal(pr.get("id"), "bigint");
    assert.equal(pr.get("total_cost"), "numeric(20,9)");
    for (const t of [
      "gateway_spend_log",
      "reconciliation_results",
      "virtual_keys",
      "grade_cache",
      "task_validation",
    ]) {
      assert.ok((await columns(f().db, t)).length > 0, `${t} exists`);
    }
    const idx = await f().db.query<{ indexdef: string }>(
      "SELECT indexdef FROM pg_indexes WHERE tablename = 'ledger_calls' AND schemaname = current_schema()",
    );
    const defs = idx.rows.map((r) => r.indexdef).join("\n");
    assert.match(defs, /\(run_name, cell_id\)/);
    assert.match(defs, /\(run_name, trace_id/);
  });

  test("re-running is a no-op", async () => {
    const again = await migrate(f().db);
    assert.deepEqual(again.applied, []);
    assert.equal(again.version, MIGRATIONS.at(-1)?.version);
    const rows = await f().db.query<{ version: number; name: string }>(
      "SELECT version, name FROM schema_migrations ORDER BY version",
    );
    assert.deepEqual(
      rows.rows.map((r) => r.version),
      MIGRATIONS.map((m) => m.version),
    );
  });

  test("concurrent migrators are serialised; each migration applies once", async () => {
    const g = await freshDb("store-migrations-concurrent", { migrate: false });
    const extra: Db[] = [];
    try {
      // On Postgres: four pools racing on one database (advisory lock). On PGlite: four callers on one session.
      for (let i = 0; i < 3; i++) extra.push(g.url ? await openDb({ url: g.url }) : g.db);
      const results = await Promise.all([g.db, ...extra].map((d) => migrate(d)));
      const applied = results.flatMap((r) => r.applied).sort();
      assert.deepEqual(
        applied,
        MIGRATIONS.map((m) => m.version),
      );
    } finally {
      for (const d of extra) if (d !== g.db) await d.close();
      await g.cleanup();
    }
  });

  test("a failing migration rolls back everything, including earlier ones in the same run", async () => {
    const g = await freshDb("store-migrations-rollback", { migrate: false });
    try {
      const bad = [
        ...MIGRATIONS,
        {
          version: 999,
          name: "broken",
          async up(tx: Db) {
            await tx.query("CREATE TABLE will_vanish (x int)");
            await tx.query("SELECT * FROM no_such_table");
          },
        },
      ];
      await assert.rejects(migrate(g.db, { migrations: bad }), (err: unknown) => {
        assert.ok(err instanceof EvalfleetError);
        assert.equal(err.code, "EF_MIGRATION");
        return true;
      });
      const t = await g.db.query<{ t: string | null }>(
        "SELECT to_regclass('run_results')::text AS t UNION ALL SELECT to_regclass('schema_migrations')::text",
      );
      assert.deepEqual(
        t.rows.map((r) => r.t),
        [null, null],
      );
    } finally {
      await g.cleanup();
    }
  });

  test("BIGINT comes back as number and NUMERIC as string on both drivers", async () => {
    const r = await f().db.query<{ b: number; n: string; arr: number[]; c: number }>(
      "SELECT 9007199254740991::bigint AS b, 1.5::numeric(20,9) AS n, ARRAY[1,2]::bigint[] AS arr, count(*) AS c FROM generate_series(1, 3)",
    );
    assert.deepEqual(r.rows[0], { b: 9007199254740991, n: "1.500000000", arr: [1, 2], c: 3 });
  });

  test("transactions: rollback on throw, nested savepoints, no interleaving of concurrent callers", async () => {
    await f().db.query("CREATE TABLE tx_probe (k text, v int)");
    await assert.rejects(
      f().db.transaction(async (tx) => {
        await tx.query("INSERT INTO tx_probe VALUES ('a', 1)");
        throw new Error("boom");
      }),
    );
    await f().db.transaction(async (tx) => {
      await tx.query("INSERT INTO tx_probe VALUES ('b', 1)");
      await assert.rejects(
        tx.transaction(async (inner) => {
          await inner.query("INSERT INTO tx_probe VALUES ('c', 1)");
          throw new Error("inner");
        }),
      );
    });
    const rows = await f().db.query<{ k: string }>("SELECT k FROM tx_probe ORDER BY k");
    assert.deepEqual(
      rows.rows.map((r) => r.k),
      ["b"],
    );
    // Read-modify-write in 20 concurrent transactions: serialised (PGlite queue) or row-locked (pg) — never lost.
    await f().db.query("INSERT INTO tx_probe VALUES ('counter', 0)");
    await Promise.all(
      Array.from({ length: 20 }, () =>
        f().db.transaction(async (tx) => {
          const cur = await tx.query<{ v: number }>("SELECT v FROM tx_probe WHERE k = 'counter' FOR UPDATE");
          await new Promise((r) => setTimeout(r, 1));
          await tx.query("UPDATE tx_probe SET v = $1 WHERE k = 'counter'", [(cur.rows[0]?.v ?? 0) + 1]);
        }),
      ),
    );
    const c = await f().db.query<{ v: number }>("SELECT v FROM tx_probe WHERE k = 'counter'");
    assert.equal(c.rows[0]?.v, 20);
  });

  test("a named schema isolates the tables; PGlite data dirs persist across reopen", async () => {
    const url = f().url;
    if (url) {
      const s = await openDb({ url, schema: "ef_schema_probe" });
      try {
        assert.deepEqual(
          (await migrate(s)).applied,
          MIGRATIONS.map((m) => m.version),
        );
        const r = await s.query<{ schema: string }>(
          "SELECT relnamespace::regnamespace::text AS schema FROM pg_class WHERE oid = 'run_results'::regclass",
        );
        assert.equal(r.rows[0]?.schema, "ef_schema_probe");
      } finally {
        await s.close();
      }
      return;
    }
    const { mkdtemp, rm } = await import("node:fs/promises");
    const { tmpdir } = await import("node:os");
    const { join } = await import("node:path");
    const dir = await mkdtemp(join(tmpdir(), "ef-pglite-"));
    try {
      const a = await openDb({ dataDir: dir });
      assert.deepEqual(
        (await migrate(a)).applied,
        MIGRATIONS.map((m) => m.version),
      );
      await a.query("INSERT INTO run_state (run_name, cell_id, status) VALUES ('r', 'c', 'completed')");
      await a.close();
      const b = await openDb({ dataDir: dir });
      assert.deepEqual((await migrate(b)).applied, []);
      assert.equal((await b.query("SELECT 1 FROM run_state")).rowCount, 1);
      await b.close();
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test("connection failures become RetryableError", async () => {
    const dead = await openDb({ url: "postgres://postgres@127.0.0.1:1/none" });
    try {
      await assert.rejects(dead.query("SELECT 1"), (err: unknown) => {
        assert.ok(err instanceof RetryableError, String(err));
        assert.equal(err.retryable, true);
        return true;
      });
    } finally {
      await dead.close();
    }
    assert.equal(isTransientDbError(Object.assign(new Error("x"), { code: "57P01" })), true);
    assert.equal(isTransientDbError(Object.assign(new Error("x"), { code: "23505" })), false);
  });
});
