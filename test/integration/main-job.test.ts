import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, describe, it } from "node:test";
import { openDb } from "../../store/db.js";

const ROOT = resolve(import.meta.dirname, "../..");

/** `evalfleet start` exactly as `npm start` runs it: no NATS_URL, no DATABASE_URL, no provider keys. */
function cleanEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of ["NATS_URL", "DATABASE_URL", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "NODE_TEST_CONTEXT"])
    delete env[k];
  for (const k of Object.keys(env)) if (k.startsWith("EVALFLEET_")) delete env[k];
  return env;
}

function runStart(stateDir: string, name: string): Promise<{ code: number | null; out: string }> {
  const env = cleanEnv();
  return new Promise((done) => {
    const child = spawn(
      process.execPath,
      [join(ROOT, "bin/evalfleet.js"), "start", "--state-dir", stateDir, "--name", name],
      {
        cwd: ROOT,
        env,
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      out += d.toString();
    });
    child.on("exit", (code) => done({ code, out }));
  });
}

describe("the main job (npm start)", () => {
  let stateDir: string;
  after(async () => {
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it("runs the sample run end to end: one row per attempt, graded, judged, ledger = the provider's bill", async () => {
    stateDir = await mkdtemp(join(tmpdir(), "ef-main-"));
    const r = await runStart(stateDir, "sample-e2e");
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /Total cells: 32/);
    assert.match(r.out, /planner: accepted/);
    assert.match(r.out, /32\/32 cells/);
    assert.match(r.out, /equal to the ledger/);
    const db = await openDb({ dataDir: join(stateDir, "pglite") });
    try {
      const rows = await db.query<{ n: number; cells: number; graded: number; judged: number }>(
        `SELECT count(*)::int AS n, count(DISTINCT cell_id)::int AS cells,
                count(*) FILTER (WHERE grade_report IS NOT NULL)::int AS graded,
                count(*) FILTER (WHERE verdict_score IS NOT NULL)::int AS judged
           FROM run_results WHERE run_name = 'sample-e2e'`,
      );
      assert.deepEqual(rows.rows[0], { n: 32, cells: 32, graded: 24, judged: 8 });
      const states = await db.query<{ status: string; n: number }>(
        "SELECT status, count(*)::int AS n FROM run_state WHERE run_name = 'sample-e2e' GROUP BY status",
      );
      assert.deepEqual(states.rows, [{ status: "completed", n: 32 }]);
      const resolved = await db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM run_results WHERE run_name = 'sample-e2e' AND grade_status = 'FULL' AND track = 'swe'",
      );
      assert.equal(resolved.rows[0]?.n, 20, "haiku misses the title task on both harnesses and repeats");
      const money = await db.query<{ ledger: string; rows: string }>(
        `SELECT (SELECT sum(cost_nano_usd) FROM ledger_calls WHERE run_name = 'sample-e2e')::text AS ledger,
                (SELECT sum(total_cost) * 1000000000 FROM run_results WHERE run_name = 'sample-e2e')::text AS rows`,
      );
      assert.equal(
        BigInt(money.rows[0]!.ledger),
        BigInt(money.rows[0]!.rows.split(".")[0]!),
        "attempt rows sum the ledger",
      );
    } finally {
      await db.close();
    }
    // Reported and exported afterwards from the same state: predictions with the real patches.
    const preds = join(stateDir, "predictions.jsonl");
    const rep = spawnSync(
      process.execPath,
      [
        join(ROOT, "bin/evalfleet.js"),
        "report",
        "sample-e2e",
        "--state-dir",
        stateDir,
        "--export",
        preds,
        "--json",
      ],
      { cwd: ROOT, env: cleanEnv(), encoding: "utf8", timeout: 120_000 },
    );
    assert.equal(rep.status, 0, rep.stderr);
    const lines = (await readFile(preds, "utf8"))
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Record<string, string>);
    assert.equal(lines.length, 32);
    assert.ok(
      lines.every((l) => l.instance_id && l.model_name_or_path && l.model_patch?.startsWith("diff --git")),
    );
  });
});
