import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { loadTaskLibrary } from "../../actors/planner/library.js";
import { startNats } from "../helpers/nats.js";

const ROOT = resolve(import.meta.dirname, "../..");
const DATASET = resolve(ROOT, "../shared/conformance/swebench/instances/swe-bench-verified-100__vexp.jsonl");

function cli(...args: string[]) {
  return cliIn(process.env, ...args);
}

function cliIn(env: NodeJS.ProcessEnv, ...args: string[]) {
  const r = spawnSync(process.execPath, [join(ROOT, "bin/evalfleet.js"), ...args], {
    encoding: "utf8",
    cwd: ROOT,
    env,
    timeout: 180_000,
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

/** A user's machine with nothing set up: no PostgreSQL, no Docker, evalfleet's state in `state`. */
function bare(): NodeJS.ProcessEnv {
  const { DATABASE_URL: _d, DOCKER_HOST: _h, NODE_TEST_CONTEXT: _t, ...env } = process.env;
  return env;
}

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), "ef-cli-"));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("evalfleet CLI", () => {
  it("plan --dry-run prints the seed's table, the total and the planner's verdict: refused while unvalidated", () => {
    const state = join(dir, "state-unvalidated");
    const r = cliIn(bare(), "plan", "examples/sample-run.yaml", "--dry-run", "--state-dir", state);
    assert.equal(r.code, 2, r.err);
    assert.match(r.out, /Cell ID\s+Harness\s+Model\s+Task\s+Repeat/);
    assert.match(r.out, /Total cells: 32/);
    assert.equal(r.out.split("\n").filter((l) => /__r\d/.test(l)).length, 20);
    assert.match(r.out, /The planner would REFUSE this run \(validation records: no results database/);
    assert.match(r.err, /3 of the run's 4 task\(s\) are not gold-validated/);
    assert.match(
      r.err,
      /tasks: sample-calc-add: not validated: grade its gold and empty patch first \(evalfleet validate-env --tasks /,
    );
    const anyway = cliIn(bare(), "plan", "examples/sample-run.yaml", "--unvalidated", "--state-dir", state);
    assert.equal(anyway.code, 0, anyway.err);
    assert.match(
      anyway.out,
      /Total cells: 32\n\nUNVALIDATED \(--unvalidated\): the planner runs these cells though 3 task/,
    );
  });

  it("once validate-env has validated the tasks, the dry run shows the cells the planner will run", () => {
    const state = join(dir, "state-validated");
    const v = cliIn(
      bare(),
      "validate-env",
      "--run",
      "examples/sample-run.yaml",
      "--data-dir",
      join(state, "pglite"),
    );
    assert.equal(v.code, 0, v.err);
    assert.match(v.out, /sample-calc-add\s+valid\s+local \(checkout\)/);
    const r = cliIn(bare(), "plan", "examples/sample-run.yaml", "--dry-run", "--state-dir", state);
    assert.equal(r.code, 0, r.err);
    assert.match(
      r.out,
      /Total cells: 32\n\nThe planner will run these cells: every graded task is gold-validated/,
    );
    const json = cliIn(bare(), "plan", "examples/sample-run.yaml", "--json", "--state-dir", state);
    const lines = json.out.trim().split("\n");
    assert.equal(lines.length, 32);
    assert.equal(JSON.parse(lines[0]!).cell_id, "claude-code__claude-sonnet-4-5__sample-calc-add__r0");
  });

  it("bad input exits non-zero and says what was wrong", async () => {
    const missing = cli("plan", "no-such-file.yaml");
    assert.equal(missing.code, 2);
    assert.match(missing.err, /cannot read run file no-such-file.yaml: ENOENT/);
    const bad = join(dir, "bad.yaml");
    await writeFile(
      bad,
      "name: x\nharnesses: []\nmodels: [{name: m, prices: {input_per_mtok: 1, output_per_mtok: 2}}]\ntasks: [t]\nrepeats: 0\n",
    );
    const r = cli("plan", bad);
    assert.equal(r.code, 2);
    assert.match(r.err, /harnesses: list at least one harness/);
    assert.match(r.err, /repeats: must be at least 1/);
    assert.equal(cli("no-such-command").code, 2);
  });

  it("an actor that cannot start (PostgreSQL unreachable) exits non-zero instead of lingering", async () => {
    const nats = await startNats();
    try {
      const r = spawnSync(process.execPath, [join(ROOT, "bin/evalfleet.js"), "actor", "planner"], {
        encoding: "utf8",
        cwd: ROOT,
        timeout: 30_000,
        env: { ...process.env, ...nats.env, DATABASE_URL: "postgres://postgres@127.0.0.1:1/none" },
      });
      assert.equal(r.signal, null, "it exited by itself (a supervisor can start it again)");
      assert.equal(r.status, 1);
      assert.match(r.stderr, /database unavailable/);
    } finally {
      await nats.cleanup();
    }
  });

  it("tasks import writes a library from SWE-bench dataset records", async () => {
    const out = join(dir, "lib");
    const r = cli("tasks", "import", DATASET, out, "--json");
    assert.equal(r.code, 0, r.err);
    assert.equal(JSON.parse(r.out).written, 100);
    assert.equal((await readdir(out)).length, 100);
    const lib = await loadTaskLibrary(out);
    const t = lib.tasks.get("astropy__astropy-14365");
    assert.equal(t?.repo, "astropy/astropy");
    assert.ok(
      Array.isArray(t?.FAIL_TO_PASS) && t.FAIL_TO_PASS.length > 0,
      "JSON-encoded test lists are decoded",
    );
    assert.equal(t?.track, "swe");
  });

  it("tasks import reports bad lines and writes nothing", async () => {
    const src = join(dir, "bad.jsonl");
    await writeFile(src, '{"instance_id": "ok-1"}\nnot json\n{"repo": "x/y"}\n');
    const out = join(dir, "lib-bad");
    const r = cli("tasks", "import", src, out);
    assert.equal(r.code, 2);
    assert.match(r.err, /line 2: not JSON/);
    assert.match(r.err, /line 3:id/);
    await assert.rejects(readdir(out));
  });
});
