/**
 * Deployed, ECS hands an actor its database as libpq's PG* variables (from the Aurora secret), never DATABASE_URL.
 * An actor started that way writes to that PostgreSQL; started with no database at all, a deployed role refuses
 * to start and says what to set — it never falls back to an embedded PGlite that would lose its rows on restart.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { openPlane, type Plane } from "../../plane/connect.js";
import { StateKeys, Subjects } from "../../protocol/subjects.js";
import { type FreshDb, freshPostgres } from "../helpers/db.js";
import { ledgerCall } from "../helpers/ledger.js";
import { startNats, type TestNats } from "../helpers/nats.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const BIN = join(ROOT, "bin", "evalfleet.js");

let nats: TestNats;
let store: FreshDb & { url: string };
let plane: Plane;
let child: ChildProcess | undefined;

before(async () => {
  nats = await startNats();
  store = await freshPostgres("actor_pg_env");
  plane = await openPlane({ nats: nats.settings, name: "test" });
});
after(async () => {
  if (child && child.exitCode === null) {
    const gone = new Promise((r) => child?.once("exit", r));
    child.kill("SIGTERM");
    await gone;
  }
  await plane?.close();
  await store?.cleanup();
  await nats?.cleanup();
});

/** What every process gets besides its settings; the test's own DATABASE_URL / PG* never leak into the child. */
function baseEnv(): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp", ...nats.env };
}

/** The PG* variables ECS gives a deployed container, pointing at the fresh database. */
function pgEnv(url: string): NodeJS.ProcessEnv {
  const u = new URL(url);
  return {
    PGHOST: u.hostname,
    PGPORT: u.port || "5432",
    PGUSER: decodeURIComponent(u.username),
    ...(u.password ? { PGPASSWORD: decodeURIComponent(u.password) } : {}),
    PGDATABASE: u.pathname.slice(1),
  };
}

describe("an actor's database from the deployed settings", { timeout: 120_000 }, () => {
  it("started with PG* variables and no DATABASE_URL, the results-writer lands rows in that PostgreSQL", async () => {
    const proc = spawn(process.execPath, [BIN, "actor", "results-writer"], {
      cwd: ROOT,
      env: { ...baseEnv(), ...pgEnv(store.url), EVALFLEET_LOG_LEVEL: "info" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    child = proc;
    let output = "";
    proc.stdout?.on("data", (b: Buffer) => (output += b.toString()));
    proc.stderr?.on("data", (b: Buffer) => (output += b.toString()));

    const run = "pg-env";
    const call = ledgerCall({ callId: `${run}-call-1`, run, cellId: "c1", attempt: 1, costNanoUsd: 1234 });
    // What the dispatcher does before it launches an attempt: its claim, without which a ledger call is refused.
    await plane.kv.budgets.put(
      StateKeys.claim(run, call.cellId, call.attempt),
      JSON.stringify({ by: "test", gen: 1, base: 0, pool: call.pool, at: new Date().toISOString() }),
    );
    await plane.js.publish(Subjects.ledger.one(run, call.cellId, call.attempt), JSON.stringify(call), {
      msgID: call.callId,
    });
    let rows: Array<{ call_id: string; cost_nano_usd: string }> = [];
    for (let i = 0; i < 600 && rows.length === 0 && proc.exitCode === null; i++) {
      rows = (
        await store.db.query<{ call_id: string; cost_nano_usd: string }>(
          "SELECT call_id, cost_nano_usd::text AS cost_nano_usd FROM ledger_calls WHERE run_name = $1",
          [run],
        )
      ).rows;
      if (rows.length === 0) await delay(100);
    }
    assert.equal(proc.exitCode, null, `the actor exited:\n${output}`);
    assert.deepEqual(
      rows,
      [{ call_id: call.callId, cost_nano_usd: "1234" }],
      `the ledger call is not in the database PG* named:\n${output}`,
    );
  });

  it("started with no database settings, a deployed role refuses to start and names what to set", () => {
    const r = spawnSync(process.execPath, [BIN, "actor", "results-writer"], {
      cwd: ROOT,
      encoding: "utf8",
      timeout: 60_000,
      env: baseEnv(),
    });
    assert.equal(r.signal, null, "it exited by itself");
    assert.notEqual(r.status, 0, r.stderr);
    assert.match(r.stderr, /no database/);
    assert.match(r.stderr, /DATABASE_URL/);
    assert.match(r.stderr, /PGHOST/);
    assert.match(r.stderr, /settings are not valid/, "it stops at its settings, before opening anything");
    assert.doesNotMatch(`${r.stdout}${r.stderr}`, /actors running/, "no actor ran on an embedded database");
  });
});
