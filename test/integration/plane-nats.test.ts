import assert from "node:assert/strict";
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { claimPlaneNats, natsLockPath } from "../../local/plane-nats.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { openDb } from "../../store/db.js";
import { migrate } from "../../store/migrations.js";
import { RUN, seedReportRun } from "./report-seed.js";

/*
 * A local plane's NATS is recorded under its state folder, and the commands run beside it use that record:
 * `report --export` reads patches from the plane's own nats-server instead of starting a second one on the same
 * store, and `status` finds the plane without NATS_URL. The owner here is a child process doing what `up` does.
 */

const ROOT = resolve(import.meta.dirname, "../..");
const run = promisify(execFile);
const PROBE_CELL = "probe";

let dir: string;
let owner: ChildProcess | undefined;
const { DATABASE_URL: _pg, NODE_TEST_CONTEXT: _t, NATS_URL: _n, ...env } = process.env;
const cli = (...args: string[]) =>
  run(process.execPath, [join(ROOT, "bin/evalfleet.js"), ...args], {
    cwd: ROOT,
    env: { ...env, EVALFLEET_STATE_DIR: dir },
  });

async function startOwner(): Promise<{ url: string }> {
  const child = spawn(process.execPath, ["--import", "tsx", "test/helpers/plane-nats-owner.ts", dir, RUN], {
    cwd: ROOT,
    env,
    stdio: ["ignore", "pipe", "inherit"],
  });
  owner = child;
  const lines = createInterface({ input: child.stdout! });
  for await (const line of lines) return JSON.parse(line) as { url: string };
  throw new Error("the owner exited before it was ready");
}

async function stopOwner(): Promise<void> {
  const child = owner;
  owner = undefined;
  if (!child || child.exitCode !== null) return;
  const exited = new Promise((r) => child.once("exit", r));
  child.kill("SIGTERM");
  await exited;
}

async function exportedProbe(file: string): Promise<string | undefined> {
  const lines = (await readFile(file, "utf8")).trimEnd().split("\n");
  const preds = lines.map((l) => JSON.parse(l) as { instance_id: string; model_patch: string });
  return preds.find((p) => p.instance_id === "astropy__astropy-1" && p.model_patch.includes("probe"))
    ?.model_patch;
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "ef-plane-nats-"));
  const db = await openDb({ dataDir: join(dir, "pglite") });
  await migrate(db);
  await seedReportRun(db);
  // One cell's patch lives in the object store only (a row from before the results-writer kept patches in diff).
  await db.query("UPDATE run_results SET patch_ref = $2, diff = NULL WHERE run_name = $1 AND cell_id = $3", [
    RUN,
    `${RUN}/${PROBE_CELL}/0/patch.diff`,
    "h-alpha__m-x__astropy__astropy-1__r0",
  ]);
  await db.close();
});

after(async () => {
  await stopOwner();
  await rm(dir, { recursive: true, force: true });
});

describe("a local plane's NATS, shared with the commands beside it", () => {
  it("report --export and status use the plane's recorded nats-server; no second server opens its store", async () => {
    const { url } = await startOwner();
    const lock = JSON.parse(await readFile(natsLockPath(dir), "utf8")) as { url: string; command: string };
    assert.deepEqual([lock.url, lock.command], [url, "up"]);

    const out = join(dir, "preds.jsonl");
    const r = await cli("report", RUN, "--export", out, "--harness", "h-alpha", "--repeat", "0");
    assert.doesNotMatch(r.stderr, /warning/, r.stderr);
    assert.match((await exportedProbe(out)) ?? "", /\+from the object store/);
    assert.equal(
      existsSync(join(dir, "nats", "report.conf")),
      false,
      "report started no nats-server of its own",
    );

    const status = JSON.parse((await cli("status", "--json")).stdout) as { runs: Array<{ run: string }> };
    assert.ok(
      status.runs.some((x) => x.run === RUN),
      "status found the plane through the record, not NATS_URL",
    );

    // watch finds it by --state-dir too (the folder `up` printed).
    const watched = await run(
      process.execPath,
      [join(ROOT, "bin/evalfleet.js"), "watch", RUN, "--once", "--json", "--state-dir", dir],
      { cwd: ROOT, env },
    );
    assert.equal((JSON.parse(watched.stdout) as { run: string }).run, RUN);

    // Another plane on the same folder is refused with who holds it.
    await assert.rejects(claimPlaneNats(dir, "up"), (err: unknown) => {
      assert.ok(err instanceof EvalfleetError);
      assert.equal(err.code, ErrorCode.Conflict);
      assert.match(
        err.message,
        new RegExp(`in use by \`evalfleet up\` \\(pid ${owner?.pid}\\) serving ${url}`),
      );
      assert.match(err.message, /--state-dir/);
      return true;
    });
  });

  it("with the plane stopped, report serves the store itself for the export and releases it", async () => {
    await stopOwner();
    assert.equal(existsSync(natsLockPath(dir)), false, "the owner released its claim");
    const out = join(dir, "preds-stopped.jsonl");
    const r = await cli("report", RUN, "--export", out, "--harness", "h-alpha", "--repeat", "0");
    assert.doesNotMatch(r.stderr, /warning/, r.stderr);
    assert.match((await exportedProbe(out)) ?? "", /\+from the object store/);
    assert.equal(existsSync(natsLockPath(dir)), false, "report released the store when done");
  });
});
