import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, describe, it } from "node:test";
import { openDb } from "../../store/db.js";
import { testRegistry, testRootfs, testRuntime } from "../helpers/docker.js";
import { collectOutput } from "../helpers/proc.js";

const ROOT = resolve(import.meta.dirname, "../..");

/**
 * `evalfleet start` exactly as `npm start` runs it: no NATS_URL, no DATABASE_URL, no provider keys. The machine's
 * container runtime and base image stay (DOCKER_HOST, EVALFLEET_BASE_ROOTFS, as CI exports them): `start` puts each
 * attempt in a container wherever a Docker API answers.
 */
function cleanEnv(): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of ["NATS_URL", "DATABASE_URL", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "NODE_TEST_CONTEXT"])
    delete env[k];
  for (const k of Object.keys(env))
    if (k.startsWith("EVALFLEET_") && k !== "EVALFLEET_BASE_ROOTFS") delete env[k];
  return env;
}

/**
 * The machine's container setup, as a user with Docker has it: the daemon, the debootstrapped base rootfs and a
 * private registry (found or started by the test helpers), so the main job runs every attempt in a container and
 * grades in containers by digest.
 */
async function dockerEnv(): Promise<NodeJS.ProcessEnv> {
  const { dockerHost } = await testRuntime();
  return {
    DOCKER_HOST: dockerHost,
    EVALFLEET_BASE_ROOTFS: await testRootfs(),
    EVALFLEET_REGISTRY: await testRegistry(),
  };
}

function runStart(
  stateDir: string,
  name: string,
  extra: NodeJS.ProcessEnv,
): Promise<{ code: number | null; out: string }> {
  const env = { ...cleanEnv(), ...extra };
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
    const out = collectOutput(child);
    child.on("exit", (code) => done({ code, out: out.text() }));
  });
}

describe("the main job (npm start)", () => {
  let stateDir: string;
  after(async () => {
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it("runs the sample run end to end: one row per attempt, graded, judged, ledger = the provider's bill", async () => {
    stateDir = await mkdtemp(join(tmpdir(), "ef-main-"));
    const docker = await dockerEnv();
    const r = await runStart(stateDir, "sample-e2e", docker);
    assert.equal(r.code, 0, r.out);
    assert.match(r.out, /^sandbox: every attempt's harness in its own container/m, r.out);
    assert.match(r.out, /Total cells: 32/);
    // Graded in containers: each task's image built offline, pushed, pinned by digest, gold-validated in it.
    assert.match(
      r.out,
      new RegExp(
        `^grader: docker — every patch graded in a fresh container .*3 built pushed to ${docker.EVALFLEET_REGISTRY}`,
        "m",
      ),
    );
    assert.match(r.out, /^graded: 24 in containers \(docker, images pinned by digest\)$/m);
    assert.match(r.out, /planner: accepted/);
    assert.match(r.out, /32\/32 cells/);
    assert.match(r.out, /equal to the ledger/);
    // the seed's summary lines
    assert.match(r.out, /^Total cost \(informational, includes budget-exempt cells\): \$\d+\.\d{4}$/m);
    assert.match(r.out, /^Billable cost: \$\d+\.\d{4} \/ \$10\.0000 budget cap$/m);
    assert.match(r.out, /^Completed: \d+ {2}Failed: \d+ {2}Skipped: 0$/m);
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
      const byGroup = await db.query<{ g: string }>(
        `SELECT harness || '/' || model || ' ' || coalesce(status, '-') || ' ' || coalesce(grade_status, '-') || ' ' ||
                coalesce(error_class, '-') || ': ' || count(*) AS g
           FROM run_results WHERE run_name = 'sample-e2e' AND track = 'swe'
          GROUP BY harness, model, status, grade_status, error_class ORDER BY 1`,
      );
      assert.equal(
        resolved.rows[0]?.n,
        20,
        `haiku misses the title task on both harnesses and repeats; got:\n${byGroup.rows.map((r) => r.g).join("\n")}\n${r.out}`,
      );
      // What graded them: the sample tasks validated in their images, which are in the registry by digest.
      const validated = await db.query<{ task_id: string; backend: string; image_ref: string }>(
        "SELECT task_id, backend, image_ref FROM task_validation WHERE valid ORDER BY task_id",
      );
      assert.deepEqual(
        validated.rows.map((v) => [v.task_id, v.backend]),
        [
          ["sample-calc-add", "docker"],
          ["sample-ranges-sum", "docker"],
          ["sample-strings-title", "docker"],
        ],
      );
      for (const v of validated.rows)
        assert.match(
          v.image_ref,
          new RegExp(`^${docker.EVALFLEET_REGISTRY}/evalfleet/task-.*@sha256:[0-9a-f]{64}$`),
        );
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
