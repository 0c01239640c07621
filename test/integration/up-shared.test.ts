import assert from "node:assert/strict";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, describe, it } from "node:test";
import { freePort } from "../../local/nats-server.js";
import { openEmbeddedOwner } from "../../store/embedded.js";
import { collectOutput, exitOf } from "../helpers/proc.js";

const ROOT = resolve(import.meta.dirname, "../..");
const BIN = join(ROOT, "bin/evalfleet.js");
const SAMPLE = join(ROOT, "examples/sample-run.yaml");

/** The environment a new user has: no DATABASE_URL, no provider keys, nothing of evalfleet's. */
function userEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env = { ...process.env };
  for (const k of ["NATS_URL", "DATABASE_URL", "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "NODE_TEST_CONTEXT"])
    delete env[k];
  for (const k of Object.keys(env)) if (k.startsWith("EVALFLEET_")) delete env[k];
  return { ...env, EVALFLEET_LOG_LEVEL: "warn", ...extra };
}

interface Proc {
  child: ChildProcess;
  out(): string;
  waitFor(re: RegExp, ms: number): Promise<RegExpMatchArray>;
  stop(): Promise<number | null>;
}

function start(args: string[], env: NodeJS.ProcessEnv): Proc {
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: ROOT,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const output = collectOutput(child);
  return {
    child,
    out: output.text,
    async waitFor(re, ms) {
      const deadline = Date.now() + ms;
      for (;;) {
        const out = output.text();
        const m = re.exec(out);
        if (m) return m;
        if (child.exitCode !== null) throw new Error(`${args[0]} exited ${child.exitCode}:\n${out}`);
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${re} in:\n${out}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    },
    stop: () => {
      const exited = exitOf(child);
      if (child.exitCode === null) child.kill("SIGINT");
      return exited;
    },
  };
}

function cli(args: string[], env: NodeJS.ProcessEnv) {
  return spawnSync(process.execPath, [BIN, ...args], { cwd: ROOT, env, encoding: "utf8", timeout: 180_000 });
}

describe("evalfleet up beside the dashboard, report and submit, as the README documents them", () => {
  const procs: Proc[] = [];
  let stateDir: string | undefined;
  after(async () => {
    for (const p of procs) await p.stop();
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it("the sample run keeps all 32 attempt rows with the dashboard open; submit's printed remedy starts the plane", async () => {
    stateDir = await mkdtemp(join(tmpdir(), "ef-up-"));
    const gatewayPort = await freePort();
    // Nothing answers at NATS_URL: `up` starts its own nats-server there, where every other command looks.
    const natsPort = await freePort();
    const env = userEnv({
      NATS_URL: `nats://127.0.0.1:${natsPort}`,
      EVALFLEET_GATEWAY_URL: `http://127.0.0.1:${gatewayPort}`,
    });

    // 1. Submitting before the plane runs: the preflight fails and prints the command that starts it.
    const early = cli(["submit", SAMPLE], env);
    assert.equal(early.status, 1, early.stderr);
    const remedy = /^\s+(evalfleet up --gateway-port \d+)$/m.exec(early.stderr);
    assert.ok(remedy, early.stderr);

    // 2. That exact command (in this test's state folder) brings the plane up with its gateway on that port.
    const up = start([...remedy[1]!.split(" ").slice(1), "--state-dir", stateDir], env);
    procs.push(up);
    await up.waitFor(/evalfleet is up/, 120_000);
    assert.match(up.out(), new RegExp(`gateway http://127\\.0\\.0\\.1:${gatewayPort} `));
    assert.match(up.out(), new RegExp(`NATS nats://127\\.0\\.0\\.1:${natsPort} \\(own nats-server\\)`));
    assert.match(up.out(), /served at postgres:\/\/postgres@127\.0\.0\.1:\d+\/postgres/);

    // 3. The dashboard in another terminal, on the same state folder.
    const dash = start(["dashboard", "--port", "0", "--json", "--state-dir", stateDir], env);
    procs.push(dash);
    const dashUrl = JSON.parse((await dash.waitFor(/^\{.*\}$/m, 60_000))[0]) as {
      url: string;
      database: string;
    };
    assert.match(dashUrl.database, /through `evalfleet up`/);

    // 4. submit, preflight included, now passes and the planner accepts.
    // up's own nats-server admits no anonymous client: submit uses the credential up names (its state folder's).
    const creds = /submit a run with: .*NATS_CREDS=(\S+) /.exec(up.out())?.[1];
    assert.equal(creds, join(stateDir, "nats", "plane.creds"), up.out());
    const submitted = cli(["submit", SAMPLE, "--json"], { ...env, NATS_CREDS: creds });
    assert.equal(submitted.status, 0, submitted.stderr);
    const verdict = JSON.parse(submitted.stdout) as { kind: string; run: string };
    assert.equal(verdict.kind, "accepted", submitted.stdout);
    const run = verdict.run;

    // 5. While it runs, the dashboard's results and a report both read the plane's database.
    const deadline = Date.now() + 600_000;
    let attempts = 0;
    for (;;) {
      const res = await fetch(new URL(`/api/runs/${encodeURIComponent(run)}`, dashUrl.url));
      const body = (await res.json()) as { phase?: string };
      const rep = (await (
        await fetch(new URL(`/api/runs/${encodeURIComponent(run)}/report`, dashUrl.url))
      ).json()) as {
        totals?: { cells?: number };
      };
      attempts = rep.totals?.cells ?? attempts;
      if (body.phase === "finished" && attempts === 32) break;
      if (Date.now() > deadline) throw new Error(`run did not finish: ${JSON.stringify(body)}\n${up.out()}`);
      await new Promise((r) => setTimeout(r, 2_000));
    }
    assert.equal(attempts, 32, "the dashboard's results table has every attempt");
    const report = cli(["report", run, "--json", "--state-dir", stateDir], env);
    assert.equal(report.status, 0, report.stderr);
    assert.equal((JSON.parse(report.stdout) as { totals: { cells: number } }).totals.cells, 32);

    // 6. Both stopped: the folder holds all 32 rows.
    assert.equal(await dash.stop(), 0, dash.out());
    assert.equal(await up.stop(), 0, up.out());
    const db = await openEmbeddedOwner(join(stateDir, "pglite"), { command: "test", serve: false });
    try {
      const rows = await db.db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM run_results WHERE run_name = $1",
        [run],
      );
      assert.equal(rows.rows[0]?.n, 32);
    } finally {
      await db.close();
    }
  });
});
