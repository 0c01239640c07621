import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { Agent, request } from "undici";
import { GatewayHeaders } from "../../gateway/server.js";
import { trueUpRun } from "../../gateway/true-up.js";
import { silentLogger } from "../../lib/log.js";
import { anthropicJsonResult } from "../../providers/anthropic.js";
import { PriceTable } from "../../providers/pricing.js";
import { startScriptedProvider } from "../../scripted-provider/index.js";
import { scriptedKeyId } from "../../scripted-provider/usage-report.js";
import { createRunKey } from "../../store/keys.js";
import { settleFromGateway } from "../../store/reconcile.js";
import { heartbeatReplica, reconcileAttempt, settleOrphans } from "../../store/spend.js";
import { freshPostgres } from "../helpers/db.js";

/*
 * Two `evalfleet gateway` processes on one PostgreSQL; one is SIGKILLed mid-run. No call is lost (the client moves
 * to the other replica), every call the upstream billed is in the spend log — the dead replica's calls as pending
 * rows at their worst-case reservation — so the log never under-counts, and reconciliation flags those cells. Once
 * the dead replica is known dead (silent past the limit) its pending rows settle as `orphaned` into the ledger at
 * their reservation: no billed call is left out of the run's total; a live replica's pending row is never touched.
 * Runs on real PostgreSQL (DATABASE_URL, else the local server): PGlite cannot be shared between processes.
 */

const UPSTREAM_KEY = "sk-upstream-sigkill";
const ADMIN_KEY = "sk-admin-sigkill";
const MODEL = "claude-sonnet-4-5";
const CLI = new URL("../../cli/main.ts", import.meta.url).pathname;

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      s.close(() => resolve(typeof a === "object" && a ? a.port : 0));
    });
  });
}

async function startReplica(port: number, config: string, dbUrl: string): Promise<ChildProcess> {
  const proc = spawn(
    process.execPath,
    ["--import", "tsx", CLI, "gateway", "--port", String(port), "--config", config],
    {
      env: {
        ...process.env,
        DATABASE_URL: dbUrl,
        GW_UPSTREAM_KEY: UPSTREAM_KEY,
        EVALFLEET_LOG_LEVEL: "warn",
      },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let out = "";
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`gateway did not start:\n${out}`)), 30_000);
    const onData = (d: Buffer) => {
      out += d.toString();
      if (out.includes("gateway listening")) {
        clearTimeout(timer);
        resolve();
      }
    };
    proc.stdout?.on("data", onData);
    proc.stderr?.on("data", onData);
    proc.once("exit", (code) => reject(new Error(`gateway exited ${code}:\n${out}`)));
  });
  return proc;
}

test("a gateway process SIGKILLed mid-run: no call lost, the log never under-counts the bill", async () => {
  // Real PostgreSQL: the gateway replicas are separate processes sharing one database.
  const fdb = await freshPostgres("gateway_sigkill");
  const provider = await startScriptedProvider({
    keys: [UPSTREAM_KEY],
    adminKeys: [ADMIN_KEY],
    scenario: (req) => ({ text: "x".repeat(40 + (req.index % 13) * 4), firstByteDelayMs: 80 }),
  });
  const dir = await mkdtemp(join(tmpdir(), "ef-gw-"));
  const config = join(dir, "gateway.json");
  await writeFile(
    config,
    JSON.stringify({
      aliases: {
        sonnet: {
          provider: "anthropic",
          base_url: provider.url,
          api_key_env: "GW_UPSTREAM_KEY",
          model: MODEL,
        },
      },
    }),
  );
  const ports = [await freePort(), await freePort()];
  // One after the other, so the first replica's id (its heartbeat row, written before it listens) is known: it is
  // killed only once it holds a call past its reservation, however slow this machine is.
  const procs = [await startReplica(ports[0]!, config, fdb.url!)];
  const killedId = (await fdb.db.query<{ replica_id: string }>("SELECT replica_id FROM gateway_replicas"))
    .rows[0]?.replica_id;
  procs.push(await startReplica(ports[1]!, config, fdb.url!));
  const holdsACall = async () => {
    for (const until = Date.now() + 10_000; Date.now() < until; ) {
      const r = await fdb.db.query(
        "SELECT 1 FROM gateway_spend_log WHERE replica_id = $1 AND status = 'pending' LIMIT 1",
        [killedId],
      );
      if (r.rows.length > 0) return;
      await new Promise((r) => setTimeout(r, 5));
    }
  };
  const urls = ports.map((p) => `http://127.0.0.1:${p}`);
  const run = "sigkill-run";
  const key = await createRunKey(fdb.db, run);
  const prices = new PriceTable();
  const agent = new Agent({ connections: 16 });
  const byCell = new Map<string, number>();
  let answered = 0;
  let retries = 0;
  let next = 0;
  await Promise.all(
    Array.from({ length: 10 }, async () => {
      while (next < 60) {
        const i = next++;
        if (i === 25) {
          await holdsACall();
          procs[0]!.kill("SIGKILL");
        }
        const cell = `cell-${i % 4}`;
        const body = JSON.stringify({
          model: "sonnet",
          max_tokens: 200,
          messages: [{ role: "user", content: `call ${i}` }],
        });
        for (let attempt = 0; ; attempt++) {
          assert.ok(attempt < 8, `call ${i} lost`);
          try {
            const res = await request(`${urls[(i + attempt) % 2]}/v1/messages`, {
              method: "POST",
              headers: { "content-type": "application/json", "x-api-key": key, [GatewayHeaders.cell]: cell },
              body,
              dispatcher: agent,
            });
            const text = await res.body.text();
            if (res.statusCode === 502) {
              retries++;
              continue;
            }
            assert.equal(res.statusCode, 200, text);
            const cost = prices.cost(MODEL, anthropicJsonResult(text).usage).costNanoUsd;
            byCell.set(cell, (byCell.get(cell) ?? 0) + cost);
            answered++;
            break;
          } catch (err) {
            if (err instanceof assert.AssertionError) throw err;
            retries++;
          }
        }
      }
    }),
  );
  await agent.destroy();
  procs[1]!.kill("SIGTERM"); // drained: its calls are all logged
  await new Promise((r) => procs[1]!.once("exit", r));
  try {
    assert.equal(answered, 60, "no call lost");
    assert.ok(retries > 0, "calls were in flight on the killed replica");
    const rows = (
      await fdb.db.query<{ status: string; cost_nano_usd: number }>(
        "SELECT status, cost_nano_usd FROM gateway_spend_log WHERE run_name = $1",
        [run],
      )
    ).rows.map((r) => ({ status: r.status, cost: Number(r.cost_nano_usd) }));
    const bill = provider.bill().total;
    const logged = rows.reduce((s, r) => s + r.cost, 0);
    assert.ok(rows.length >= bill.calls, `rows ${rows.length} >= billed calls ${bill.calls}`);
    assert.ok(logged >= bill.costNanoUsd, `log ${logged} >= bill ${bill.costNanoUsd}`);
    assert.ok(
      rows.some((r) => r.status === "pending"),
      "the killed replica's calls stay pending at their reservation",
    );
    let flagged = 0;
    for (const [cell, ledgerNanoUsd] of byCell) {
      const rec = await reconcileAttempt(fdb.db, run, cell, ledgerNanoUsd);
      assert.ok(rec.differenceNanoUsd >= 0, `${cell} under-counted`);
      if (rec.flagged) flagged++;
    }
    assert.ok(flagged > 0);

    // The killed replica stopped heartbeating; the drained one said it stopped. Nothing is an orphan while the
    // killed one may still be alive (its last heartbeat is recent) ...
    const pendingBefore = rows.filter((r) => r.status === "pending").length;
    assert.deepEqual(await settleOrphans(fdb.db), [], "a replica heard from within the limit is alive");
    // ... and a live replica's pending row (PostgreSQL away when it settled) is never taken for an orphan.
    await heartbeatReplica(fdb.db, "live-replica", "test");
    await fdb.db.query(
      `INSERT INTO gateway_spend_log (request_id, run_name, cell_id, alias, model, cost_nano_usd, status, replica_id)
       VALUES ('live-call', 'other-run', 'c', 'sonnet', $1, 5, 'pending', 'live-replica')`,
      [MODEL],
    );
    assert.deepEqual(await settleOrphans(fdb.db, 60_000), []);
    assert.deepEqual(await settleOrphans(fdb.db, 0).then((r) => r.filter((x) => x === run)), [run]);
    // A replica gone for a week with nothing pending is pruned from gateway_replicas.
    await fdb.db.query(
      "INSERT INTO gateway_replicas (replica_id, host, seen_at) VALUES ('ancient', 'old', now() - interval '8 days')",
    );
    await settleOrphans(fdb.db);
    const ancient = await fdb.db.query("SELECT 1 FROM gateway_replicas WHERE replica_id = 'ancient'");
    assert.equal(ancient.rowCount, 0);
    const live = await fdb.db.query<{ status: string }>(
      "SELECT status FROM gateway_spend_log WHERE request_id = 'live-call'",
    );
    assert.equal(
      live.rows[0]?.status,
      "orphaned",
      "with a 0 limit even a live replica is silent: the limit rules",
    );
    const orphaned = await fdb.db.query<{ n: string }>(
      "SELECT count(*)::text AS n FROM gateway_spend_log WHERE run_name = $1 AND status = 'orphaned'",
      [run],
    );
    assert.equal(Number(orphaned.rows[0]?.n), pendingBefore, "every pending row of the killed replica");
    // Into the ledger: every call the gateway saw, the orphans at their reservation, marked estimated.
    assert.ok((await settleFromGateway(fdb.db, run)) >= answered);
    const ledger = await fdb.db.query<{ status: string; estimated: boolean; n: string; cost: string }>(
      `SELECT status, estimated, count(*)::text AS n, sum(cost_nano_usd)::text AS cost FROM ledger_calls
        WHERE run_name = $1 GROUP BY status, estimated`,
      [run],
    );
    const of = (st: string) => ledger.rows.filter((r) => r.status === st);
    assert.equal(Number(of("orphaned")[0]?.n ?? 0), pendingBefore);
    assert.ok(
      of("orphaned").every((r) => r.estimated),
      "an orphan's cost is an estimate",
    );
    const metered = of("ok").reduce((a, r) => a + Number(r.cost), 0);
    const total = ledger.rows.reduce((a, r) => a + Number(r.cost), 0);
    assert.ok(metered <= bill.costNanoUsd, `metered ledger ${metered} <= bill ${bill.costNanoUsd}`);
    assert.ok(total >= bill.costNanoUsd, `ledger with orphans ${total} >= bill ${bill.costNanoUsd}`);
    assert.ok(
      total - bill.costNanoUsd <= rows.filter((r) => r.status === "pending").reduce((a, r) => a + r.cost, 0),
      "over the bill by at most the orphans' reservations",
    );

    // The run is over: its guessed calls are trued up to the provider's usage report for the key — once the minute
    // of its last call is complete in the report, and only while nobody else used the key in the run's window.
    const prices = new PriceTable();
    const report = {
      provider: "anthropic" as const,
      baseUrl: provider.url,
      adminKey: ADMIN_KEY,
      apiKeyId: scriptedKeyId(UPSTREAM_KEY),
      lagMs: 0,
    };
    const deps = {
      db: fdb.db,
      log: silentLogger(),
      sourceOf: async (alias: string) =>
        alias === "sonnet" ? { upstreamKey: "scripted", report } : undefined,
      pricesOf: async () => prices,
    };
    const last = await fdb.db.query<{ ms: string }>(
      "SELECT (extract(epoch FROM max(created_at)) * 1000)::bigint::text AS ms FROM gateway_spend_log WHERE run_name = $1",
      [run],
    );
    const lastCallMs = Number(last.rows[0]?.ms);
    assert.deepEqual(
      (await trueUpRun({ ...deps, now: () => lastCallMs + 1 }, run)).map((o) => o.kind),
      ["waiting"],
      "the minute of the run's last call is not over in the report yet",
    );
    const later = { ...deps, now: () => Math.max(Date.now(), lastCallMs + 66_000) };
    assert.match(JSON.stringify(await trueUpRun(later, run)), /another run used the same upstream key/);
    await fdb.db.query("DELETE FROM gateway_spend_log WHERE request_id = 'live-call'");
    assert.match(
      JSON.stringify(
        await trueUpRun(
          {
            ...later,
            sourceOf: async () => ({ upstreamKey: "k", report: { ...report, adminKey: "sk-wrong" } }),
          },
          run,
        ),
      ),
      /admin key/,
      "a wrong admin key says so and changes nothing",
    );
    const trued = await trueUpRun(later, run);
    assert.deepEqual(trued, [{ kind: "trued", calls: pendingBefore }]);
    assert.ok((await settleFromGateway(fdb.db, run)) > 0);
    const exact = await fdb.db.query<{ cost: string; estimated: string }>(
      `SELECT sum(cost_nano_usd)::text AS cost, count(*) FILTER (WHERE estimated)::text AS estimated
         FROM ledger_calls WHERE run_name = $1`,
      [run],
    );
    assert.equal(
      Number(exact.rows[0]?.cost),
      bill.costNanoUsd,
      "the ledger equals the provider's bill exactly",
    );
    assert.equal(
      Number(exact.rows[0]?.estimated),
      pendingBefore > 1 ? pendingBefore : 0,
      "one guessed call is exact; several share the rest, their split an estimate",
    );
    assert.equal(await settleFromGateway(fdb.db, run), 0, "settling again changes nothing");
  } finally {
    await provider.close();
    await fdb.cleanup();
    await rm(dir, { recursive: true, force: true });
  }
});
