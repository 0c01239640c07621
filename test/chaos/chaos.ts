/**
 * `npm run test:chaos`: a 2,000-cell sim run with every kind of process SIGKILLed at seeded random moments, and
 * nats-server and PostgreSQL crashed and restarted; then the invariants. Prints what was killed when and the checks
 * as a table; the last line is one JSON object; exits 1 when a check fails. Bounded to ~10 minutes; removes every
 * process and temp dir it made on any exit.
 *
 * Env: CHAOS_SEED (default random, printed), CHAOS_CELLS_REPEATS (default 5 → 2,000 cells), DATABASE_URL (used only
 * when no private PostgreSQL can be made with initdb / pg_ctl; then PostgreSQL is not restarted).
 */
import { randomBytes } from "node:crypto";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import pg from "pg";
import type { BudgetState } from "../../actors/dispatcher/budget.js";
import { openPlane, type Plane } from "../../actors/runtime/connect.js";
import { ProgressKeys, StateKeys, Subjects } from "../../protocol/subjects.js";
import { Consumers, Streams } from "../../protocol/topology.js";
import { freePort } from "../../scripts/local/nats-server.js";
import { type ScriptedProvider, startScriptedProvider } from "../../scripts/scripted-provider/index.js";
import { type Db, openDb, quoteIdent } from "../../store/db.js";
import { migrate } from "../../store/migrations.js";
import { startNats, startNatsCluster } from "../helpers/nats.js";
import { PrivatePg, Proc, rng, waitForLog } from "./procs.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const BIN = join(ROOT, "bin/evalfleet.js");
const DISPATCHER_CHILD = join(ROOT, "test/chaos/dispatcher-child.ts");
const HARD_LIMIT_MS = 9 * 60_000 + 45_000;
const POST_FINAL_WAIT_MS = 90_000;
const UPSTREAM_KEY = "sk-chaos-upstream";
const MODELS = [
  {
    name: "claude-sonnet-4-5",
    provider: "anthropic",
    prices: { input_per_mtok: 3, output_per_mtok: 15, cache_read_per_mtok: 0.3, cache_write_per_mtok: 3.75 },
  },
  {
    name: "claude-haiku-4-5",
    provider: "anthropic",
    prices: { input_per_mtok: 1, output_per_mtok: 5, cache_read_per_mtok: 0.1, cache_write_per_mtok: 1.25 },
  },
];
const TASKS = 100;
const PARALLEL = 100;
const MAX_COST_USD = 0.02;
const BUDGET_USD = 15;
const SIM_CALLS = 3;

interface Event {
  atMs: number;
  target: string;
  action: string;
  detail: string;
}
interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

const t0 = Date.now();
const events: Event[] = [];
const checks: Check[] = [];
const cleanups: Array<() => Promise<void>> = [];
const procs: Proc[] = [];
let cleaning: Promise<void> | undefined;

function note(target: string, action: string, detail = ""): void {
  const e = { atMs: Date.now() - t0, target, action, detail };
  events.push(e);
  process.stderr.write(`[chaos +${(e.atMs / 1000).toFixed(1)}s] ${target} ${action} ${detail}\n`);
}

async function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    await Promise.allSettled(procs.map((p) => p.kill("SIGKILL")));
    for (const p of procs) p.close();
    for (const c of cleanups.reverse()) await c().catch(() => {});
  })();
  await cleaning;
}

for (const sig of ["SIGINT", "SIGTERM"] as const) {
  process.on(sig, () => {
    note("chaos", "interrupted", sig);
    void cleanup().finally(() => process.exit(130));
  });
}

const hardLimit = setTimeout(() => {
  note("chaos", "hard time limit", `${HARD_LIMIT_MS / 1000}s`);
  checks.push({ name: "finished within the time limit", ok: false, detail: "hard limit hit" });
  report({ aborted: true });
  void cleanup().finally(() => process.exit(1));
}, HARD_LIMIT_MS);

function pad(s: string, n: number): string {
  return s.length >= n ? s : s + " ".repeat(n - s.length);
}

let reported = false;
function report(extra: Record<string, unknown>): void {
  if (reported) return;
  reported = true;
  const lines: string[] = [];
  lines.push("", "what was killed when (seconds since start)", "");
  lines.push(`${pad("t (s)", 8)} ${pad("target", 34)} ${pad("action", 14)} detail`);
  for (const e of events)
    lines.push(`${pad((e.atMs / 1000).toFixed(1), 8)} ${pad(e.target, 34)} ${pad(e.action, 14)} ${e.detail}`);
  lines.push("", "checks", "");
  lines.push(`${pad("check", 72)} ${pad("result", 6)} detail`);
  for (const c of checks) lines.push(`${pad(c.name, 72)} ${pad(c.ok ? "ok" : "FAIL", 6)} ${c.detail}`);
  lines.push("");
  process.stdout.write(`${lines.join("\n")}\n`);
  const ok = checks.length > 0 && checks.every((c) => c.ok);
  process.stdout.write(
    `${JSON.stringify({
      ok,
      seed,
      elapsedMs: Date.now() - t0,
      kills: events.filter((e) => e.action === "SIGKILL" || e.action === "crash").length,
      events,
      checks,
      ...extra,
    })}\n`,
  );
}

const seed = Number(process.env.CHAOS_SEED ?? randomBytes(4).readUInt32BE(0));
const rand = rng(seed);
process.stderr.write(`chaos seed ${seed} (CHAOS_SEED=${seed} reproduces the schedule)\n`);

type Mode = "single" | "cluster";

async function main(): Promise<Record<string, unknown>> {
  const dir = await mkdtemp(join(tmpdir(), "ef-chaos-"));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  await chmod(dir, 0o711); // a private PostgreSQL runs as the postgres user under it
  const logDir = join(dir, "logs");
  await (await import("node:fs/promises")).mkdir(logDir);

  // PostgreSQL: a private instance we may crash, else DATABASE_URL (then never restarted).
  let adminUrl: string;
  let privatePg: PrivatePg | undefined;
  try {
    privatePg = await PrivatePg.create(join(dir, "pg"), await freePort());
    const p = privatePg;
    cleanups.push(() => p.stop());
    adminUrl = p.adminUrl;
    note("postgres", "started", `private instance on port ${p.port}`);
  } catch (err) {
    const url = process.env.DATABASE_URL;
    if (!url) {
      throw new Error(
        `no PostgreSQL: a private instance could not be made (${String(err)}) and DATABASE_URL is not set. Set DATABASE_URL=postgres://... (a server where this user may CREATE DATABASE).`,
      );
    }
    adminUrl = url;
    note("postgres", "using", "DATABASE_URL (no private instance: PostgreSQL will not be restarted)");
  }
  const modes = (process.env.CHAOS_MODES ?? "single,cluster")
    .split(",")
    .filter((m): m is Mode => m === "single" || m === "cluster");
  const out: Record<string, unknown> = {};
  for (const mode of modes) {
    const left = t0 + HARD_LIMIT_MS - Date.now();
    if (left < 150_000) {
      note(mode, "skipped", `only ${Math.round(left / 1000)} s left of the time limit`);
      checks.push({ name: `[${mode}] scenario ran`, ok: false, detail: "skipped: not enough time left" });
      continue;
    }
    out[mode] = await scenario(mode, dir, logDir, adminUrl, privatePg, Math.min(left - 75_000, 270_000));
  }
  return out;
}

async function scenario(
  mode: Mode,
  dir0: string,
  logDir0: string,
  adminUrl: string,
  privatePg: PrivatePg | undefined,
  waitMs: number,
): Promise<Record<string, unknown>> {
  const dir = join(dir0, mode);
  const logDir = join(logDir0, mode);
  await (await import("node:fs/promises")).mkdir(dir, { recursive: true });
  await (await import("node:fs/promises")).mkdir(logDir, { recursive: true });
  const dbName = `ef_chaos_${mode}_${process.pid}_${randomBytes(3).toString("hex")}`;
  await adminSql(adminUrl, `CREATE DATABASE ${quoteIdent(dbName)}`);
  cleanups.push(() => adminSql(adminUrl, `DROP DATABASE IF EXISTS ${quoteIdent(dbName)} WITH (FORCE)`));
  const u = new URL(adminUrl);
  u.pathname = `/${dbName}`;
  const dbUrl = u.toString();
  const db = await openDb({ url: dbUrl });
  cleanups.push(() => db.close());
  await migrate(db);

  // nats-server (or a three-node cluster, streams with three replicas), temp stores that survive restarts.
  process.env.EVALFLEET_STREAM_REPLICAS = mode === "cluster" ? "3" : "1";
  const nats = mode === "cluster" ? await startNatsCluster(3) : await startNats();
  cleanups.push(() => nats.cleanup());
  const natsUrl = nats.servers.join(",");
  note(`${mode}: nats`, "started", natsUrl);
  const client = await openPlane({ servers: nats.servers, name: "chaos-client" });
  cleanups.push(() => client.close());

  // The scripted provider: the bill the ledger must equal.
  const provider: ScriptedProvider = await startScriptedProvider({
    keys: [UPSTREAM_KEY],
    scenario: { text: "ok", usage: { input: 1_000, output: 100 } },
  });
  cleanups.push(() => provider.close());

  // The task library: swe tasks the sim can "fix".
  const lib = join(dir, "tasks");
  await (await import("node:fs/promises")).mkdir(lib);
  for (let i = 0; i < TASKS; i++) {
    const id = `chaos-${String(i).padStart(3, "0")}`;
    await writeFile(join(lib, `${id}.yaml`), `id: ${id}\ntrack: swe\n`);
  }

  const baseEnv: NodeJS.ProcessEnv = {
    ...process.env,
    NATS_URL: natsUrl,
    EVALFLEET_STREAM_REPLICAS: mode === "cluster" ? "3" : "1",
    DATABASE_URL: dbUrl,
    EVALFLEET_LOG_LEVEL: "warn",
    EVALFLEET_UPSTREAM_URL: provider.url,
    EVALFLEET_WORKDIR: join(dir, "work"),
    EVALFLEET_GIT_MIRRORS: join(dir, "mirrors"),
  };
  const mk = (name: string, cmd: string, args: string[], env: NodeJS.ProcessEnv = {}) => {
    const p = new Proc(`${mode}: ${name}`, cmd, args, { ...baseEnv, ...env }, join(logDir, `${name}.log`));
    procs.push(p);
    return p;
  };

  // Gateway replicas in front of the scripted provider.
  const gwConfig = join(dir, "gateway.json");
  await writeFile(
    gwConfig,
    JSON.stringify({
      aliases: Object.fromEntries(
        MODELS.map((m) => [
          m.name,
          { provider: "anthropic", base_url: provider.url, api_key_env: "CHAOS_UPSTREAM_KEY", model: m.name },
        ]),
      ),
    }),
  );
  const gwPorts = [await freePort(), await freePort()];
  const gateways = gwPorts.map((port, i) =>
    mk(`gateway-${i + 1}`, process.execPath, [BIN, "gateway", "--port", String(port), "--config", gwConfig], {
      CHAOS_UPSTREAM_KEY: UPSTREAM_KEY,
      // its fleet pacer connects with one URL string
      NATS_URL: nats.servers[0],
    }),
  );
  const actors: Record<string, Proc> = {};
  for (const name of ["planner", "results-writer", "grader-supervisor"])
    actors[name] = mk(name, process.execPath, [BIN, "actor", name]);
  actors.dispatcher = mk("dispatcher", process.execPath, ["--import", "tsx", DISPATCHER_CHILD], {
    EVALFLEET_BACKEND: "sim",
    EVALFLEET_SIM_CALLS: String(SIM_CALLS),
    EVALFLEET_SIM_THINK_MS: "2500",
    // No TIMEOUT in the mix: an attempt > 0 then means a dead dispatcher's attempt was relaunched.
    EVALFLEET_SIM_MIX: "PATCH_READY=9,HARNESS_ERROR=1",
    CHAOS_UPSTREAM_URL: provider.url,
    CHAOS_UPSTREAM_KEY: UPSTREAM_KEY,
  });
  for (const g of gateways) g.start();
  await Promise.all(
    gateways.map((_, i) => waitForLog(join(logDir, `gateway-${i + 1}.log`), "gateway listening", 60_000)),
  );
  for (const a of Object.values(actors)) a.start();
  await waitForLog(join(logDir, "dispatcher.log"), "dispatcher ready", 60_000);
  await sleep(3_000); // the other actors' consumers
  note(
    `${mode}: plane`,
    "started",
    `gateways ${gwPorts.join(",")}; actors ${Object.keys(actors).join(", ")}`,
  );

  // Submit the 2,000-cell run.
  const run = `chaos-${mode}-${seed}`;
  const repeats = Number(
    mode === "cluster" ? (process.env.CHAOS_CLUSTER_REPEATS ?? 3) : (process.env.CHAOS_CELLS_REPEATS ?? 5),
  );
  const harnesses = [
    { name: "sim-a", adapter: "sim" },
    { name: "sim-b", adapter: "sim" },
  ];
  const totalCells = TASKS * harnesses.length * MODELS.length * repeats;
  await client.js.publish(
    Subjects.runSubmit,
    JSON.stringify({
      name: run,
      harnesses,
      models: MODELS,
      tasks: ["*"],
      task_library_path: lib,
      repeats,
      parallel_runs: PARALLEL,
      budget_usd: BUDGET_USD,
      max_cost_usd: MAX_COST_USD,
      timeout_seconds: 120,
    }),
  );
  const submittedAt = Date.now();
  note(
    `${mode}: run`,
    "submitted",
    `${run}: ${totalCells} cells, parallel ${PARALLEL}, budget $${BUDGET_USD}`,
  );

  // The schedule: each kind of process once at a random moment in the first ~70 s of the run.
  const kinds = ["planner", "dispatcher", "results-writer", "grader-supervisor", "gateway", "nats-server"];
  if (privatePg && mode === "single") kinds.push("postgres");
  const schedule = kinds
    .map((k) => ({
      kind: k,
      atMs: Math.round(4_000 + rand() * 66_000),
      downMs: Math.round(500 + rand() * 2_500),
    }))
    .sort((a, b) => a.atMs - b.atMs);
  process.stderr.write(
    `${mode} schedule: ${schedule.map((s) => `${s.kind}@${(s.atMs / 1000).toFixed(1)}s(down ${s.downMs}ms)`).join(" ")}\n`,
  );
  let chaosErr: unknown;
  const chaos = (async () => {
    for (const s of schedule) {
      const wait = submittedAt + s.atMs - Date.now();
      if (wait > 0) await sleep(wait);
      if (s.kind === "nats-server") {
        const i = mode === "cluster" ? Math.floor(rand() * nats.nodes.length) : 0;
        const node = nats.nodes[i]!;
        const name = `${mode}: nats-server n${i + 1}`;
        note(name, "SIGKILL", "store kept");
        await node.stop("SIGKILL");
        // a cluster node stays down longer: the other two carry the streams meanwhile
        const down = mode === "cluster" ? s.downMs * 4 : s.downMs;
        await sleep(down);
        await node.start();
        note(name, "restarted", `after ${down} ms`);
      } else if (s.kind === "postgres" && privatePg) {
        note(`${mode}: postgres`, "crash", "pg_ctl stop -m immediate");
        await privatePg.crash();
        await sleep(s.downMs);
        await privatePg.start();
        note(`${mode}: postgres`, "restarted", `after ${s.downMs} ms`);
      } else {
        const p = s.kind === "gateway" ? gateways[Math.floor(rand() * gateways.length)]! : actors[s.kind]!;
        const pid = p.pid;
        await p.kill("SIGKILL");
        note(p.name, "SIGKILL", `pid ${pid}`);
        await sleep(s.downMs);
        p.start();
        note(p.name, "restarted", `after ${s.downMs} ms, pid ${p.pid}`);
      }
    }
  })().catch((err: unknown) => {
    chaosErr = err;
  });

  // Follow the run until every cell is final (from PostgreSQL; errors while it is down are expected).
  let finished = false;
  let finalAt = 0;
  let last = "";
  let counts: Record<string, number> = {};
  while (Date.now() - submittedAt < waitMs) {
    await sleep(2_000);
    try {
      const r = await db.query<{ status: string; n: string }>(
        "SELECT status, count(*)::text AS n FROM run_state WHERE run_name = $1 GROUP BY status",
        [run],
      );
      counts = Object.fromEntries(r.rows.map((x) => [x.status, Number(x.n)]));
      const total = Object.values(counts).reduce((a, b) => a + b, 0);
      const open = (counts.pending ?? 0) + (counts.running ?? 0);
      const line = JSON.stringify(counts);
      if (line !== last) process.stderr.write(`[chaos +${((Date.now() - t0) / 1000).toFixed(1)}s] ${line}\n`);
      last = line;
      if (total === totalCells && open === 0 && schedule.every((s) => s.atMs < Date.now() - submittedAt)) {
        if (!finished) {
          note(`${mode}: run`, "cells final", line);
          finalAt = Date.now();
        }
        finished = true;
        // Finished for the plane means the progress key: every cell final, grades in, the ledger landed (a
        // results-writer killed holding ledger messages gets them back only after the consumer's ack wait).
        const e = await client.kv.progress.get(ProgressKeys.run(run)).catch(() => null);
        const phase = e && e.length > 0 ? e.json<{ phase?: string }>().phase : undefined;
        if (phase === "finished") break;
        if (Date.now() - finalAt > POST_FINAL_WAIT_MS) {
          note(
            `${mode}: run`,
            "gave up",
            `progress key still ${phase} ${POST_FINAL_WAIT_MS / 1000} s after every cell was final`,
          );
          break;
        }
      }
    } catch {
      // PostgreSQL restarting
    }
  }
  await chaos;
  if (chaosErr) note(`${mode}: chaos`, "error", String(chaosErr));
  note(`${mode}: run`, finished ? "finished" : "NOT finished", JSON.stringify(counts));

  const res = await runChecks({ mode, db, client, provider, run, totalCells, finished, chaosErr });
  // This scenario's processes and servers go now; the next one starts its own.
  await Promise.allSettled(procs.map((p) => p.kill("SIGKILL")));
  await client.close().catch(() => {});
  await nats.cleanup().catch(() => {});
  await provider.close().catch(() => {});
  return res;
}

async function runChecks(c: {
  mode: Mode;
  db: Db;
  client: Plane;
  provider: ScriptedProvider;
  run: string;
  totalCells: number;
  finished: boolean;
  chaosErr: unknown;
}): Promise<Record<string, unknown>> {
  const { db, run, totalCells } = c;
  const check = (name: string, ok: boolean, detail: string) =>
    checks.push({ name: `[${c.mode}] ${name}`, ok, detail });

  // 1. every run finished (PostgreSQL and the progress key)
  const prog = await c.client.kv.progress.get(ProgressKeys.run(run)).catch(() => null);
  const phase = prog && prog.length > 0 ? (prog.json<{ phase?: string }>().phase ?? "?") : "none";
  check("run finished (every cell final in run_state)", c.finished, `progress key phase: ${phase}`);
  // Why not: grades still awaited (a grader killed holding grade jobs gets them back after the consumer's ack
  // wait), or the ledger consumer's ack floor behind the stream's end.
  const pendingGrades = await scalar(
    db,
    "SELECT count(*)::text AS v FROM run_results WHERE run_name = $1 AND grade_status = 'PENDING'",
    [run],
  ).catch(() => -1);
  const ledgerInfo = await c.client.jsm.streams.info(Streams.ledger.name).catch(() => null);
  const lc = Consumers.resultsWriterLedger;
  const ledgerCons = await c.client.jsm.consumers.info(lc.stream, lc.durable).catch(() => null);
  const gradeCons = await c.client.jsm.consumers
    .info(Consumers.graderSupervisor.stream, Consumers.graderSupervisor.durable)
    .catch(() => null);
  check(
    "progress key says finished",
    phase === "finished",
    `${phase}; ${pendingGrades} attempts grade_status PENDING; ledger ack floor ${ledgerCons?.ack_floor.stream_seq ?? "?"} / stream last ${ledgerInfo?.state.last_seq ?? "?"}; grade jobs pending ${gradeCons?.num_pending ?? "?"}, unacked ${gradeCons?.num_ack_pending ?? "?"}, redelivered ${gradeCons?.num_redelivered ?? "?"}`,
  );

  // 2. one run_state row per cell; one attempt row per cell that ran
  const stateRows = await scalar(db, "SELECT count(*)::text AS v FROM run_state WHERE run_name = $1", [run]);
  const distinctState = await scalar(
    db,
    "SELECT count(DISTINCT cell_id)::text AS v FROM run_state WHERE run_name = $1",
    [run],
  );
  check(
    "one run_state row per cell",
    stateRows === totalCells && distinctState === totalCells,
    `${stateRows} rows, ${distinctState} cells, ${totalCells} expected`,
  );
  const ran = await scalar(
    db,
    "SELECT count(*)::text AS v FROM run_state WHERE run_name = $1 AND status <> 'skipped'",
    [run],
  );
  const results = await scalar(db, "SELECT count(*)::text AS v FROM run_results WHERE run_name = $1", [run]);
  const orphanResults = await scalar(
    db,
    `SELECT count(*)::text AS v FROM run_results r LEFT JOIN run_state s USING (run_name, cell_id)
      WHERE r.run_name = $1 AND s.cell_id IS NULL`,
    [run],
  );
  const missingResults = await scalar(
    db,
    `SELECT count(*)::text AS v FROM run_state s LEFT JOIN run_results r USING (run_name, cell_id)
      WHERE s.run_name = $1 AND s.status <> 'skipped' AND r.cell_id IS NULL`,
    [run],
  );
  check(
    "exactly one attempt row per cell that ran",
    missingResults === 0 && orphanResults === 0 && results >= ran,
    `${results} run_results rows; ${ran} cells not skipped; ${missingResults} missing; ${orphanResults} without a cell`,
  );

  // 3. ledger vs the provider's bill, per key: no row lost or doubled
  const bill = c.provider.bill();
  const line = bill.byKey[UPSTREAM_KEY];
  const ledger = await db.query<{ n: string; cost: string }>(
    "SELECT count(*)::text AS n, COALESCE(sum(cost_nano_usd),0)::text AS cost FROM ledger_calls WHERE run_name = $1",
    [run],
  );
  const ledgerCalls = Number(ledger.rows[0]?.n ?? 0);
  const ledgerCost = BigInt(ledger.rows[0]?.cost ?? "0");
  const billCalls = line?.calls ?? 0;
  const billCost = BigInt(line?.costNanoUsd ?? 0);
  const otherKeys = Object.keys(bill.byKey).filter((k) => k !== UPSTREAM_KEY);
  // How many ledger messages the stream holds for the run: published-but-not-landed vs never published.
  const streamInfo = await c.client.jsm.streams
    .info(Streams.ledger.name, { subjects_filter: Subjects.ledger.run(run) })
    .catch(() => null);
  const streamLedger = streamInfo
    ? Object.values(streamInfo.state.subjects ?? {}).reduce((a, b) => a + b, 0)
    : -1;
  // Per cell: the provider saw "fix <cell> (call i)"; a cell whose ledger has more rows than the bill doubled one.
  const billedPerCell = new Map<string, number>();
  for (const call of c.provider.calls()) {
    if (!call.billed) continue;
    const m = /fix (\S+) \(call/.exec(JSON.stringify(call.body));
    const cell = m?.[1] ?? "?";
    billedPerCell.set(cell, (billedPerCell.get(cell) ?? 0) + 1);
  }
  const perCell = await db.query<{ cell_id: string; n: string; max_attempt: number }>(
    "SELECT cell_id, count(*)::text AS n, max(attempt) AS max_attempt FROM ledger_calls WHERE run_name = $1 GROUP BY cell_id",
    [run],
  );
  const relaunched = await db.query<{ cell_id: string }>(
    "SELECT cell_id FROM run_results WHERE run_name = $1 AND attempt > 0",
    [run],
  );
  const relaunchedCells = new Set(relaunched.rows.map((r) => r.cell_id));
  let doubled = 0;
  let lostExplained = 0;
  let lostUnexplained = 0;
  const lostCells: string[] = [];
  const ledgerPerCell = new Map(perCell.rows.map((r) => [r.cell_id, Number(r.n)]));
  for (const cell of new Set([...billedPerCell.keys(), ...ledgerPerCell.keys()])) {
    const b = billedPerCell.get(cell) ?? 0;
    const l = ledgerPerCell.get(cell) ?? 0;
    if (l > b) doubled += l - b;
    if (b > l) {
      // A dispatcher SIGKILLed between the provider's answer and the shim's ledger publish loses that row with
      // the process (the sim's shim lives in the dispatcher); its cell is then relaunched (attempt > 0).
      if (relaunchedCells.has(cell)) lostExplained += b - l;
      else {
        lostUnexplained += b - l;
        lostCells.push(cell);
      }
    }
  }
  check(
    "no ledger row doubled (per cell: ledger ≤ bill)",
    doubled === 0 && ledgerCalls <= billCalls,
    `ledger ${ledgerCalls} rows / ${streamLedger} msgs in ${Streams.ledger.name} / bill ${billCalls} calls; ${doubled} extra rows`,
  );
  check(
    "no ledger row lost (except a killed dispatcher's in-flight calls)",
    lostUnexplained === 0,
    `${lostUnexplained} unexplained${lostCells.length ? ` (cells ${lostCells.slice(0, 5).join(", ")})` : ""}; ${lostExplained} in flight in a SIGKILLed dispatcher`,
  );
  const exact = ledgerCalls === billCalls && ledgerCost === billCost;
  check(
    "ledger total = provider bill (per key)",
    exact || (lostUnexplained === 0 && doubled === 0),
    `key ${UPSTREAM_KEY}: ledger ${ledgerCost} nano-USD / bill ${billCost} nano-USD${exact ? " (exact)" : ` (Δ ${billCost - ledgerCost} = lost with a killed dispatcher)`}; other keys billed: ${otherKeys.length}`,
  );

  // 4. budget: billable spend may pass the cap by at most the reservations in flight
  const budgetEntry = await c.client.kv.budgets.get(StateKeys.budget(run)).catch(() => null);
  const budget = budgetEntry && budgetEntry.length > 0 ? budgetEntry.json<BudgetState>() : null;
  const capNano = BigInt(BUDGET_USD * 1e9);
  const inFlight = BigInt(PARALLEL + relaunchedCells.size) * BigInt(MAX_COST_USD * 1e9);
  const over = billCost - capNano;
  check(
    "budget exceeded by no more than in-flight reservations",
    over <= inFlight,
    `spent ${billCost} nano-USD, cap ${capNano}, over by ${over > 0n ? over : 0n} ≤ allowance ${inFlight} ((parallel ${PARALLEL} + relaunched ${relaunchedCells.size}) × max_cost_usd)`,
  );
  check(
    "budget state settled (no open reservation)",
    budget !== null && Object.keys(budget.open ?? {}).length === 0,
    budget
      ? `remaining ${String(budget.remainingNano)} nano-USD, open ${Object.keys(budget.open ?? {}).length}`
      : "no budget key",
  );
  if (c.chaosErr) check("chaos schedule ran", false, String(c.chaosErr));
  return {
    run,
    cells: totalCells,
    ledgerCalls,
    billCalls,
    ledgerCostNanoUsd: String(ledgerCost),
    billCostNanoUsd: String(billCost),
    relaunchedCells: relaunchedCells.size,
  };
}

async function scalar(db: Db, sql: string, params: unknown[]): Promise<number> {
  const r = await db.query<{ v: string }>(sql, params);
  return Number(r.rows[0]?.v ?? 0);
}

async function adminSql(url: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

let exitCode = 1;
try {
  const extra = await main();
  report(extra);
  exitCode = checks.every((c) => c.ok) ? 0 : 1;
} catch (err) {
  note("chaos", "failed", err instanceof Error ? (err.stack ?? err.message) : String(err));
  checks.push({ name: "chaos script ran to the end", ok: false, detail: String(err) });
  report({});
} finally {
  clearTimeout(hardLimit);
  await cleanup();
}
process.exit(exitCode);
