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
  const r = spawnSync(process.execPath, [join(ROOT, "bin/evalfleet.js"), ...args], {
    encoding: "utf8",
    cwd: ROOT,
    timeout: 60_000,
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), "ef-cli-"));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("evalfleet CLI", () => {
  it("plan --dry-run prints the seed's table and the total", () => {
    const r = cli("plan", "examples/sample-run.yaml", "--dry-run");
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /Cell ID\s+Harness\s+Model\s+Task\s+Repeat/);
    assert.match(r.out, /Total cells: 32/);
    assert.equal(r.out.split("\n").filter((l) => /__r\d/.test(l)).length, 20);
  });

  it("plan --json prints every cell as one JSON line", () => {
    const r = cli("plan", "examples/sample-run.yaml", "--json");
    const lines = r.out.trim().split("\n");
    assert.equal(lines.length, 32);
    assert.equal(JSON.parse(lines[0]!).cell_id, "claude-code__claude-sonnet-4-5__sample-calc-add__r0");
  });

  it("bad input exits non-zero and says what was wrong", async () => {
    const missing = cli("plan", "no-such-file.yaml");
    assert.equal(missing.code, 2);
    assert.match(missing.err, /cannot read run file no-such-file.yaml: ENOENT/);
    const bad = join(dir, "bad.yaml");
    await writeFile(bad, "name: x\nharnesses: []\nmodels: [{name: m}]\ntasks: [t]\nrepeats: 0\n");
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
        env: { ...process.env, NATS_URL: nats.url, DATABASE_URL: "postgres://postgres@127.0.0.1:1/none" },
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
