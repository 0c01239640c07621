import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { buildReport } from "../../report/aggregate.js";
import { loadReportInput } from "../../report/load.js";
import type { Report } from "../../report/types.js";
import { openDb } from "../../store/db.js";
import { migrate } from "../../store/migrations.js";
import { insertLedgerCalls, saveRunMetadata, upsertAttemptResults } from "../../store/results.js";
import { type FreshDb, freshDb } from "../helpers/db.js";
import { HARNESSES, RUN, seedReportRun } from "./report-seed.js";

const ROOT = path.resolve(import.meta.dirname, "../..");
const run = promisify(execFile);

/** One number from SQL: sums come back as NUMERIC text and are compared exactly. */
async function one(f: FreshDb, sql: string, params: unknown[] = [RUN]): Promise<number> {
  const r = await f.db.query<{ v: string | number | null }>(sql, params);
  return Number(r.rows[0]?.v ?? 0);
}

describe("evalfleet report: figures equal sums over the database", () => {
  let f: FreshDb;
  let report: Report;
  before(async () => {
    f = await freshDb("report");
    await seedReportRun(f.db);
    report = buildReport(await loadReportInput(f.db, RUN));
  });
  after(async () => {
    await f?.cleanup();
  });

  it("money: total, billable and retried spend are ledger sums (voided rows included in spend)", async () => {
    const total = await one(f, "SELECT sum(cost_nano_usd)::text AS v FROM ledger_calls WHERE run_name = $1");
    const billable = await one(
      f,
      `SELECT sum(l.cost_nano_usd)::text AS v FROM ledger_calls l
         LEFT JOIN run_results r ON r.run_name = l.run_name AND r.cell_id = l.cell_id
        WHERE l.run_name = $1 AND r.cost_mode IS DISTINCT FROM 'subscription'`,
    );
    const voided = await one(
      f,
      "SELECT sum(cost_nano_usd)::text AS v FROM ledger_calls WHERE run_name = $1 AND voided",
    );
    assert.ok(voided > 0, "the seed voids a retried attempt's calls");
    assert.equal(report.totals.costNanoUsd, total);
    assert.equal(report.totals.billableNanoUsd, billable);
    assert.equal(report.totals.retriedSpendNanoUsd, voided);
    assert.ok(billable < total, "the exempt harness's spend is not billable");
    assert.equal(
      report.totals.calls,
      await one(f, "SELECT count(*) AS v FROM ledger_calls WHERE run_name = $1"),
    );
    const last = report.spendOverTime.at(-1)!;
    assert.equal(last.totalNanoUsd, total);
    assert.equal(last.billableNanoUsd, billable);
  });

  it("per harness × model: cost, tokens, attempts and resolved equal grouped SQL", async () => {
    assert.deepEqual(
      report.groups.map((g) => g.harness),
      [...HARNESSES],
    );
    for (const g of report.groups) {
      const p = [RUN, g.harness, g.model];
      const where = "l.run_name = $1 AND r.harness = $2 AND r.model = $3";
      const from =
        "FROM ledger_calls l JOIN run_results r ON r.run_name = l.run_name AND r.cell_id = l.cell_id";
      assert.equal(
        g.costNanoUsd,
        await one(f, `SELECT sum(l.cost_nano_usd)::text AS v ${from} WHERE ${where}`, p),
      );
      assert.equal(
        g.retriedSpendNanoUsd,
        await one(
          f,
          `SELECT COALESCE(sum(l.cost_nano_usd), 0)::text AS v ${from} WHERE ${where} AND l.voided`,
          p,
        ),
      );
      for (const [kind, col] of [
        ["input", "input_tokens"],
        ["output", "output_tokens"],
        ["cacheRead", "cache_read_tokens"],
        ["cacheWrite", "cache_write_tokens"],
        ["reasoning", "reasoning_tokens"],
      ] as const)
        assert.equal(
          g.tokens[kind],
          await one(f, `SELECT sum(l.${col})::text AS v ${from} WHERE ${where}`, p),
          kind,
        );
      const rw = "run_name = $1 AND harness = $2 AND model = $3";
      assert.equal(g.cells, await one(f, `SELECT count(*) AS v FROM run_results WHERE ${rw}`, p));
      assert.equal(g.attempts, await one(f, `SELECT sum(attempt + 1) AS v FROM run_results WHERE ${rw}`, p));
      assert.equal(
        g.resolved,
        await one(f, `SELECT count(*) AS v FROM run_results WHERE ${rw} AND resolved`, p),
      );
      assert.equal(
        g.scored,
        await one(f, `SELECT count(*) AS v FROM run_results WHERE ${rw} AND success IS NOT NULL`, p),
      );
      assert.equal(
        g.medianLatencyMs,
        await one(
          f,
          `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY latency_ms) AS v FROM run_results WHERE ${rw}`,
          p,
        ),
      );
    }
    const alpha = report.groups[0]!;
    // 4 scored (pending and infra grades are not), 3 resolved; t0 2/2, t1 1/2 -> pass@1 0.75, pass@2 1
    assert.deepEqual([alpha.scored, alpha.resolved, alpha.passAt1, alpha.passAtK.value], [4, 3, 0.75, 1]);
    assert.equal(alpha.billableNanoUsd, alpha.costNanoUsd);
    assert.equal(report.groups[1]!.billableNanoUsd, 0);
    assert.deepEqual(report.groups[1]!.errorClasses, { tests_failed: 4, harness_error: 1 });
  });

  it("a running cell's calls (no attempt row yet) are in its harness × model, not a group apart", async () => {
    const run = "report-running";
    await saveRunMetadata(f.db, {
      runName: run,
      config: { name: run, harnesses: [{ name: "h__x" }, { name: "h" }], models: [{ name: "m.1" }] },
      version: "test",
    });
    await upsertAttemptResults(f.db, [
      {
        runName: run,
        cellId: "h__m.1__t1__r0",
        attempt: 0,
        harness: "h",
        model: "m.1",
        taskId: "t1",
        repeat: 0,
      },
    ]);
    const call = (callId: string, cellId: string, costNanoUsd: number) => ({
      callId,
      runName: run,
      cellId,
      attempt: 0,
      model: "m.1",
      status: "ok",
      costNanoUsd,
    });
    await insertLedgerCalls(f.db, [
      call("r1", "h__m.1__t1__r0", 1_000),
      // still running: no run_results row
      call("r2", "h__m.1__t2__r0", 20_000),
      call("r3", "h__x__m.1__t1__r0", 300_000),
      // a cell id no harness × model of the run starts
      call("r4", "ghost__cell", 4_000_000),
    ]);
    const r = buildReport(await loadReportInput(f.db, run));
    assert.deepEqual(
      r.groups.map((g) => [g.harness, g.model, g.costNanoUsd, g.calls]),
      [
        ["(no attempt row)", "m.1", 4_000_000, 1],
        ["h", "m.1", 21_000, 2],
        ["h__x", "m.1", 300_000, 1],
      ],
    );
  });

  it("per-phase cost is the phase_results sum", async () => {
    const beta = report.groups[1]!;
    assert.deepEqual(
      beta.phases.map((p) => [p.phase, p.costNanoUsd]),
      [
        ["implement", 300_000_000],
        ["review", 111_111_111],
      ],
    );
    const sum = await one(
      f,
      "SELECT (sum(total_cost) * 1000000000)::bigint::text AS v FROM phase_results WHERE run_name = $1",
    );
    assert.equal(
      beta.phases.reduce((s, p) => s + p.costNanoUsd, 0),
      sum,
    );
  });
});

describe("`evalfleet report` CLI on an embedded database", () => {
  let dir: string;
  let expected: Report;
  const { DATABASE_URL: _pg, NODE_TEST_CONTEXT: _t, ...env } = process.env;
  const cli = (...args: string[]) =>
    run(process.execPath, ["--import", "tsx", "cli/main.ts", ...args, "--state-dir", dir], {
      cwd: ROOT,
      env: { ...env, NATS_URL: "nats://127.0.0.1:1" },
    });
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "ef-report-cli-"));
    const db = await openDb({ dataDir: path.join(dir, "pglite") });
    await migrate(db);
    await seedReportRun(db);
    expected = buildReport({ ...(await loadReportInput(db, RUN)), generatedAt: "x" });
    await db.close();
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("--format json, csv and table; --export predictions.jsonl; --plots", async () => {
    const json = JSON.parse((await cli("report", RUN, "--json")).stdout) as Report;
    assert.deepEqual({ ...json, generatedAt: "x" }, expected);
    const csv = (await cli("report", RUN, "--format", "csv")).stdout.trimEnd().split("\r\n");
    assert.equal(csv.length, 3);
    assert.match(csv[0]!, /^harness,model,cells,attempts,/);
    const out = path.join(dir, "predictions.jsonl");
    const plots = path.join(dir, "plots");
    const table = await cli(
      "report",
      RUN,
      "--export",
      out,
      "--plots",
      plots,
      "--repeat",
      "0",
      "--harness",
      "h-alpha",
    );
    assert.match(table.stdout, /^Run report-run: 12 cells/);
    assert.match(table.stdout, /Cost per phase:/);
    const preds = (await readFile(out, "utf8"))
      .trimEnd()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, string>);
    assert.equal(preds.length, 3);
    for (const p of preds) {
      assert.deepEqual(Object.keys(p), ["instance_id", "model_name_or_path", "model_patch"]);
      assert.equal(p.model_name_or_path, "h-alpha__m-x");
      assert.match(p.model_patch!, /^diff --git /);
    }
    for (const f of ["resolved-vs-cost.svg", "spend-over-time.svg"])
      assert.match(await readFile(path.join(plots, f), "utf8"), /<svg [^>]*>[\s\S]*<\/svg>\s*$/);
  });

  it("an unknown run or a bad flag exits non-zero and says what to do", async () => {
    await assert.rejects(cli("report", "no-such-run"), (err: { code: number; stderr: string }) => {
      assert.equal(err.code, 1);
      assert.match(err.stderr, /run "no-such-run" is not in embedded PGlite/);
      assert.match(err.stderr, /Runs there: report-run/);
      assert.match(err.stderr, /evalfleet status/);
      return true;
    });
    await assert.rejects(cli("report", RUN, "--format", "xml"), (err: { code: number; stderr: string }) => {
      assert.equal(err.code, 2);
      assert.match(err.stderr, /--format must be one of table, csv, json/);
      return true;
    });
  });
});
