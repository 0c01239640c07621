import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import type { CompareReport } from "../../report/compare.js";
import { openDb } from "../../store/db.js";
import { migrate } from "../../store/migrations.js";
import { saveRunMetadata } from "../../store/results.js";
import { RUN, seedReportRun } from "./report-seed.js";

/*
 * `evalfleet compare` on an embedded database holding two runs of the same tasks: the report's seeded run, and a
 * copy of it run under a lower max_turns where h-beta resolves everything.
 */

const ROOT = path.resolve(import.meta.dirname, "../..");
const run = promisify(execFile);
const RUN_B = `${RUN}-b`;

describe("`evalfleet compare` CLI", () => {
  let dir: string;
  const { DATABASE_URL: _pg, NODE_TEST_CONTEXT: _t, ...env } = process.env;
  const cli = (...args: string[]) =>
    run(process.execPath, [path.join(ROOT, "bin/evalfleet.js"), ...args, "--state-dir", dir], {
      cwd: ROOT,
      env,
    });
  before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "ef-compare-"));
    const db = await openDb({ dataDir: path.join(dir, "pglite") });
    await migrate(db);
    await seedReportRun(db);
    await saveRunMetadata(db, {
      runName: RUN_B,
      config: { name: RUN_B, budget_usd: 5, max_turns: 10 },
      version: "test",
    });
    await db.query(
      `INSERT INTO run_results (run_name, cell_id, harness, model, task_id, repeat, attempt, status, grade_status,
                                resolved, success, error_class, harness_metadata)
       SELECT $2, cell_id, harness, model, task_id, repeat, attempt, 'PATCH_READY',
              CASE WHEN harness = 'h-beta' THEN 'FULL' ELSE grade_status END,
              CASE WHEN harness = 'h-beta' THEN true ELSE resolved END,
              CASE WHEN harness = 'h-beta' THEN 1 ELSE success END, error_class, harness_metadata
         FROM run_results WHERE run_name = $1`,
      [RUN, RUN_B],
    );
    await db.query(
      `INSERT INTO ledger_calls (call_id, run_name, cell_id, attempt, model, status, cost_nano_usd, price_version)
       SELECT call_id || '-b', $2, cell_id, attempt, model, status, cost_nano_usd * 2, price_version
         FROM ledger_calls WHERE run_name = $1`,
      [RUN, RUN_B],
    );
    await db.close();
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("two runs: the paired test per harness × model, with the cap that differs named", async () => {
    const { stdout } = await cli("compare", RUN, RUN_B);
    assert.match(stdout, /^Compare report-run and report-run-b by harness × model: 2 comparison\(s\)/);
    assert.match(stdout, /report-run: h-beta \/ m-x {2}vs {2}report-run-b: h-beta \/ m-x/);
    assert.match(
      stdout,
      /McNemar exact test: \d+ attempt pairs, A only 0, B only \d+, both \d+, neither \d+: p = 0\.\d+/,
    );
    assert.match(
      stdout,
      /difference \(A − B\): -\d+\.\d points \[95% CI -\d+\.\d, [-+]\d+\.\d\] \(paired task bootstrap\)/,
    );
    assert.match(
      stdout,
      /warning: caps \(max_turns\) differ: null \(report-run: h-alpha \/ m-x\) vs 10 \(report-run-b: h-alpha \/ m-x\)/,
    );
    const json = JSON.parse((await cli("compare", RUN, RUN_B, "--json")).stdout) as CompareReport;
    const beta = json.comparisons.find((c) => c.a.harness === "h-beta")!;
    assert.ok(beta.perTask.losses > 0 && beta.perTask.wins === 0);
    assert.equal(beta.b.costNanoUsd, beta.a.costNanoUsd * 2);
  });

  it("one run by harness; --plot writes the frontier across runs", async () => {
    const plot = path.join(dir, "frontier.svg");
    const { stdout, stderr } = await cli("compare", RUN, "--by", "harness", "--plot", plot);
    assert.match(stdout, /h-alpha \/ m-x {2}vs {2}h-beta \/ m-x/);
    assert.match(stderr, /plot: .*frontier\.svg/);
    assert.match(await readFile(plot, "utf8"), /<svg [^>]*>[\s\S]*report-run: h-alpha[\s\S]*<\/svg>/);
  });

  it("bad input says what was wrong and what to do", async () => {
    await assert.rejects(cli("compare", RUN, "--by", "task"), (e: { code: number; stderr: string }) => {
      assert.equal(e.code, 2);
      assert.match(e.stderr, /--by must be harness or model, got "task"/);
      return true;
    });
    await assert.rejects(cli("compare", RUN, "nope"), (e: { code: number; stderr: string }) => {
      assert.match(e.stderr, /run "nope" is not in embedded PGlite.*Runs there:/s);
      return true;
    });
    await assert.rejects(cli("compare", RUN, RUN), /name two runs, or one run with --by/);
  });
});
