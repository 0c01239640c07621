/**
 * `npm run test:chaos`: runs with every kind of process SIGKILLed at seeded random moments, and nats-server and
 * PostgreSQL crashed and restarted; then the invariants (checks.ts). Three scenarios, chosen with CHAOS_MODES
 * (default all, in this order):
 *
 * - `single`: 2,000 cells on the sim backend, one nats-server;
 * - `cluster`: 1,200 cells on the sim backend, a three-node NATS cluster (streams with three replicas);
 * - `local`: 200 cells on the local backend: real `evalfleet task` processes with their shims and a command-adapter
 *   harness; one task is SIGKILLed while a call of its is in flight.
 *
 * In every scenario each model call goes harness → shim → a balancer in front of two gateway replicas (the run's
 * key, made at plan time and read from KV) → the scripted provider, whose bill the ledger is checked against.
 * Prints what was killed when and the checks as a table; the last line is one JSON object; exits 1 when a check
 * fails. Bounded to ~20 minutes; removes every process and temp dir it made on any exit.
 *
 * Env: CHAOS_SEED (default random, printed), CHAOS_MODES, CHAOS_CELLS_REPEATS (single, default 5 → 2,000 cells),
 * CHAOS_CLUSTER_REPEATS (default 3 → 1,200), CHAOS_LOCAL_REPEATS (default 10 → 200), CHAOS_LOG_DIR (keep the
 * processes' logs there), DATABASE_URL (used only when no private PostgreSQL can be made with initdb / pg_ctl; then
 * PostgreSQL is not restarted).
 */
import { randomBytes } from "node:crypto";
import { chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { openPlane } from "../../plane/connect.js";
import { ProgressKeys, Subjects } from "../../protocol/subjects.js";
import { seededRandom } from "../../report/bootstrap.js";
import {
  type Reply,
  type ScriptedProvider,
  type ScriptedRequest,
  startScriptedProvider,
} from "../../scripted-provider/index.js";
import { scriptedKeyId } from "../../scripted-provider/usage-report.js";
import { type Db, openDb, quoteIdent } from "../../store/db.js";
import { migrate } from "../../store/migrations.js";
import { runsWithTruedCalls } from "../../store/spend.js";
import { startNats, startNatsCluster } from "../helpers/nats.js";
import { startBalancer } from "./balancer.js";
import { type Check, type Incident, runChecks } from "./checks.js";
import { cellsBySlug, harnessCommand, localCallOf, TaskKiller, writeLocalLibrary } from "./local.js";
import { killMarked, PrivatePg, Proc, stablePort, waitForLog } from "./procs.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const BIN = join(ROOT, "bin/evalfleet.js");
const DISPATCHER_CHILD = join(ROOT, "test/chaos/dispatcher-child.ts");
const HARD_LIMIT_MS = 19 * 60_000 + 30_000;
const POST_FINAL_WAIT_MS = 90_000;
const UPSTREAM_KEY = "sk-chaos-upstream";
const ADMIN_KEY = "sk-chaos-admin";
/** dead-replica detection (60 s) + a sweep (30 s) + the run's last minute + the gateway's and writer's sweeps */
const TRUE_UP_WAIT_MS = 240_000;
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
/** Every process the run starts (and, through the environment, their children) carries this marker. */
const MARK = { name: "EVALFLEET_CHAOS_RUN", value: `${process.pid}-${randomBytes(4).toString("hex")}` };

type Mode = "single" | "cluster" | "local";
interface ModeSpec {
  backend: "sim" | "local";
  natsNodes: number;
  crashPostgres: boolean;
  tasks: number;
  harnesses: Array<{ name: string; adapter: string; settings?: Record<string, unknown> }>;
  repeats: number;
  parallel: number;
  budgetUsd: number;
  maxCostUsd: number;
  timeoutSeconds: number;
  /** the provider holds each call this long before answering (a call can be caught in flight) */
  providerDelayMs: number;
  /** kills land this long after the submission, at random */
  killFromMs: number;
  killToMs: number;
  /** how long the run may take at most */
  runMs: number;
  /** what the scenario needs at least of the time limit */
  needsMs: number;
}

const simHarnesses = [
  { name: "sim-a", adapter: "sim" },
  { name: "sim-b", adapter: "sim" },
];
const localHarness = (name: string, calls: number) => ({
  name,
  adapter: "command",
  settings: { command: harnessCommand(calls), env: { [MARK.name]: MARK.value } },
});
/** The 2,000-cell sim scenario; the cluster one is the same on three nodes, without the PostgreSQL crash. */
const SIM_SINGLE: ModeSpec = {
  backend: "sim",
  natsNodes: 1,
  crashPostgres: true,
  tasks: 100,
  harnesses: simHarnesses,
  repeats: Number(process.env.CHAOS_CELLS_REPEATS ?? 5),
  parallel: 100,
  budgetUsd: 15,
  maxCostUsd: 0.02,
  timeoutSeconds: 120,
  providerDelayMs: 0,
  killFromMs: 4_000,
  killToMs: 70_000,
  runMs: 270_000,
  needsMs: 150_000,
};
const SPECS: Record<Mode, ModeSpec> = {
  single: SIM_SINGLE,
  cluster: {
    ...SIM_SINGLE,
    natsNodes: 3,
    crashPostgres: false,
    repeats: Number(process.env.CHAOS_CLUSTER_REPEATS ?? 3),
  },
  local: {
    backend: "local",
    natsNodes: 1,
    crashPostgres: true,
    tasks: 5,
    harnesses: [localHarness("curl-3", 3), localHarness("curl-2", 2)],
    repeats: Number(process.env.CHAOS_LOCAL_REPEATS ?? 10),
    parallel: 8,
    budgetUsd: 1.5,
    maxCostUsd: 0.05,
    timeoutSeconds: 120,
    providerDelayMs: 400,
    killFromMs: 10_000,
    killToMs: 120_000,
    runMs: 600_000,
    needsMs: 240_000,
  },
};
const SIM_CALLS = 3;

interface Event {
  atMs: number;
  target: string;
  action: string;
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
    // Tasks and harnesses a killed dispatcher or task left behind.
    await killMarked(MARK.name, MARK.value).catch(() => 0);
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
  lines.push(`${pad("check", 78)} ${pad("result", 6)} detail`);
  for (const c of checks) lines.push(`${pad(c.name, 78)} ${pad(c.ok ? "ok" : "FAIL", 6)} ${c.detail}`);
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
const rand = seededRandom(seed);
process.stderr.write(`chaos seed ${seed} (CHAOS_SEED=${seed} reproduces the schedule)\n`);

async function main(): Promise<Record<string, unknown>> {
  const dir = await mkdtemp(join(tmpdir(), "ef-chaos-"));
  cleanups.push(() => rm(dir, { recursive: true, force: true }));
  await chmod(dir, 0o711); // a private PostgreSQL runs as the postgres user under it
  // CHAOS_LOG_DIR keeps every process's log after the run (it is removed with the temp dir otherwise).
  const logDir = process.env.CHAOS_LOG_DIR ?? join(dir, "logs");
  await mkdir(logDir, { recursive: true });

  // PostgreSQL: a private instance we may crash, else DATABASE_URL (then never restarted).
  let adminUrl: string;
  let privatePg: PrivatePg | undefined;
  try {
    privatePg = await PrivatePg.create(join(dir, "pg"), await stablePort());
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
  const modes = (process.env.CHAOS_MODES ?? "single,cluster,local")
    .split(",")
    .filter((m): m is Mode => m in SPECS);
  const out: Record<string, unknown> = {};
  for (const mode of modes) {
    const spec = SPECS[mode];
    const left = t0 + HARD_LIMIT_MS - Date.now();
    if (left < spec.needsMs) {
      note(mode, "skipped", `only ${Math.round(left / 1000)} s left of the time limit`);
      checks.push({ name: `[${mode}] scenario ran`, ok: false, detail: "skipped: not enough time left" });
      continue;
    }
    out[mode] = await scenario(
      mode,
      spec,
      dir,
      logDir,
      adminUrl,
      privatePg,
      Math.min(left - 75_000, spec.runMs),
    );
  }
  return out;
}

async function scenario(
  mode: Mode,
  spec: ModeSpec,
  dir0: string,
  logDir0: string,
  adminUrl: string,
  privatePg: PrivatePg | undefined,
  waitMs: number,
): Promise<Record<string, unknown>> {
  const dir = join(dir0, mode);
  const logDir = join(logDir0, mode);
  await mkdir(dir, { recursive: true });
  await mkdir(logDir, { recursive: true });
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
  const replicas = spec.natsNodes > 1 ? "3" : "1";
  process.env.EVALFLEET_STREAM_REPLICAS = replicas;
  // Ports below the ephemeral range: a restart must find its port free.
  const nats =
    spec.natsNodes > 1
      ? await startNatsCluster(spec.natsNodes, { port: stablePort })
      : await startNats({ port: stablePort });
  cleanups.push(() => nats.cleanup());
  const natsUrl = nats.servers.join(",");
  note(`${mode}: nats`, "started", natsUrl);
  const client = await openPlane({ nats: nats.settings, name: "chaos-client" });
  cleanups.push(() => client.close());

  // The scripted provider: the bill the ledger must equal. In the local scenario it also kills a task mid-call.
  const killer = spec.backend === "local" ? new TaskKiller(MARK, t0) : undefined;
  const reply: Reply = {
    text: "ok",
    usage: { input: 1_000, output: 100 },
    ...(spec.providerDelayMs > 0 ? { firstByteDelayMs: spec.providerDelayMs } : {}),
  };
  // While a gateway replica is about to be killed, the provider holds every call it gets, so the replica dies with
  // calls in flight whose answers reach nobody (what its orphan settlement and the true-up are for).
  let holdUntil = 0;
  let held = 0;
  const provider: ScriptedProvider = await startScriptedProvider({
    keys: [UPSTREAM_KEY],
    adminKeys: [ADMIN_KEY],
    scenario: (req: ScriptedRequest) => {
      killer?.onCall(req);
      const hold = holdUntil - Date.now();
      if (hold <= 0) return reply;
      held++;
      return { ...reply, firstByteDelayMs: Math.max(reply.firstByteDelayMs ?? 0, hold) };
    },
  });
  cleanups.push(() => provider.close());

  // The task library: swe tasks the sim can "fix", or copies of the sample calc task for real tasks.
  const lib = join(dir, "tasks");
  await mkdir(lib);
  if (spec.backend === "local") await writeLocalLibrary(ROOT, lib, spec.tasks);
  else
    for (let i = 0; i < spec.tasks; i++) {
      const id = `chaos-${String(i).padStart(3, "0")}`;
      await writeFile(join(lib, `${id}.yaml`), `id: ${id}\ntrack: swe\n`);
    }

  // Two gateway replicas in front of the scripted provider, one balancer in front of them: the upstream every
  // shim forwards to, with the run's key.
  const gwConfig = join(dir, "gateway.json");
  await writeFile(
    gwConfig,
    JSON.stringify({
      aliases: Object.fromEntries(
        MODELS.map((m) => [
          m.name,
          {
            provider: "anthropic",
            base_url: provider.url,
            api_key_env: "CHAOS_UPSTREAM_KEY",
            model: m.name,
            // The provider's own usage record: calls a killed replica held are trued up to it after the run.
            usage_report: {
              admin_key_env: "CHAOS_ADMIN_KEY",
              api_key_id: scriptedKeyId(UPSTREAM_KEY),
              lag_seconds: 0,
            },
          },
        ]),
      ),
    }),
  );
  const gwPorts = [await stablePort(), await stablePort()];
  const balancer = await startBalancer(gwPorts);
  cleanups.push(() => balancer.close());

  const baseEnv: NodeJS.ProcessEnv = {
    ...process.env,
    [MARK.name]: MARK.value,
    ...nats.env,
    // the dispatchers mint each attempt's NATS user with the account's signing key
    NATS_ACCOUNT: nats.signer.account,
    NATS_SIGNING_KEY: nats.signer.signingSeed,
    EVALFLEET_STREAM_REPLICAS: replicas,
    DATABASE_URL: dbUrl,
    EVALFLEET_LOG_LEVEL: "warn",
    EVALFLEET_GATEWAY_URL: balancer.url,
    EVALFLEET_WORKDIR: join(dir, "work"),
    EVALFLEET_GIT_MIRRORS: join(dir, "mirrors"),
    // the planner reads the run's library from this run's folder only
    EVALFLEET_TASK_LIBRARY_ROOTS: dir,
  };
  // Nothing may carry a key of its own: tasks (and the sim) read the run's key from KV.
  delete baseEnv.EVALFLEET_RUN_KEY;
  // What was down when (toMs is Infinity until it is back).
  const incidents: Incident[] = [];
  const outage = (kind: Incident["kind"]) => {
    const i: Incident = { kind, fromMs: Date.now(), toMs: Number.POSITIVE_INFINITY };
    incidents.push(i);
    return () => {
      i.toMs = Date.now();
    };
  };
  // A process that dies by itself is restarted a second later, as a supervisor (ECS) would. Exiting at start
  // because PostgreSQL or NATS is down is what an actor should do; any other death is a finding (a failed check).
  const crashes: string[] = [];
  let over = false;
  const mk = (name: string, cmd: string, args: string[], env: NodeJS.ProcessEnv = {}) => {
    const p = new Proc(`${mode}: ${name}`, cmd, args, { ...baseEnv, ...env }, join(logDir, `${name}.log`));
    p.onCrash = (how, upMs) => {
      if (over) return;
      const startedAt = Date.now() - upMs;
      const down = incidents.find(
        (i) =>
          (i.kind === "postgres" || i.kind === "nats-server") &&
          upMs < 30_000 &&
          i.fromMs <= Date.now() &&
          i.toMs >= startedAt - 5_000,
      );
      if (down) note(p.name, "exited", `${how} ${upMs} ms after start, ${down.kind} down; restarted in 1 s`);
      else {
        crashes.push(`${name} ${how} at +${((Date.now() - t0) / 1000).toFixed(1)}s`);
        note(p.name, "died", `${how} (nobody killed it); restarted in 1 s`);
      }
      setTimeout(() => {
        if (!over && !p.alive) p.start();
      }, 1_000).unref();
    };
    procs.push(p);
    return p;
  };
  const gateways = gwPorts.map((port, i) =>
    mk(`gateway-${i + 1}`, process.execPath, [BIN, "gateway", "--port", String(port), "--config", gwConfig], {
      CHAOS_UPSTREAM_KEY: UPSTREAM_KEY,
      CHAOS_ADMIN_KEY: ADMIN_KEY,
      // its fleet pacer connects with one URL string
      NATS_URL: nats.servers[0],
      NATS_CREDS: nats.creds,
    }),
  );
  const actors: Record<string, Proc> = {};
  // The planner reads task libraries only under its roots: this scenario's is a temp folder.
  for (const name of ["planner", "results-writer", "grader-supervisor"])
    actors[name] = mk(name, process.execPath, [BIN, "actor", name], { EVALFLEET_TASK_LIBRARY_ROOTS: lib });
  actors.dispatcher = mk("dispatcher", process.execPath, ["--import", "tsx", DISPATCHER_CHILD], {
    EVALFLEET_BACKEND: spec.backend,
    EVALFLEET_SIM_CALLS: String(SIM_CALLS),
    EVALFLEET_SIM_THINK_MS: "2500",
    // No TIMEOUT in the mix: an attempt > 0 then means a dead dispatcher's attempt was relaunched.
    EVALFLEET_SIM_MIX: "PATCH_READY=9,HARNESS_ERROR=1",
    // What is under test is the plane's recovery, with a curl harness that reaches its shim directly: tasks run
    // their harnesses as processes here, whatever container runtime answers (the container path has its own
    // tests: hostile-harness, dispatcher-task).
    EVALFLEET_SANDBOX: "process",
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
    `${spec.backend} backend; gateways ${gwPorts.join(",")} behind ${balancer.url}; actors ${Object.keys(actors).join(", ")}`,
  );

  // Submit the run.
  const run = `chaos-${mode}-${seed}`;
  const totalCells = spec.tasks * spec.harnesses.length * MODELS.length * spec.repeats;
  await client.js.publish(
    Subjects.runSubmit,
    JSON.stringify({
      name: run,
      harnesses: spec.harnesses,
      models: MODELS,
      tasks: ["*"],
      task_library_path: lib,
      repeats: spec.repeats,
      unvalidated: true,
      parallel_runs: spec.parallel,
      budget_usd: spec.budgetUsd,
      max_cost_usd: spec.maxCostUsd,
      timeout_seconds: spec.timeoutSeconds,
    }),
  );
  const submittedAt = Date.now();
  note(
    `${mode}: run`,
    "submitted",
    `${run}: ${totalCells} cells, parallel ${spec.parallel}, budget $${spec.budgetUsd}`,
  );

  // The schedule: each kind of process once at a random moment of the kill window.
  const kinds = ["planner", "dispatcher", "results-writer", "grader-supervisor", "gateway", "nats-server"];
  if (privatePg && spec.crashPostgres) kinds.push("postgres");
  if (killer) kinds.push("task");
  // A task is killed in the first third of the window: later, a run whose budget ran out may have no task left.
  const schedule = kinds
    .map((k) => ({
      kind: k,
      atMs: Math.round(
        spec.killFromMs + rand() * ((spec.killToMs - spec.killFromMs) / (k === "task" ? 3 : 1)),
      ),
      downMs: Math.round(500 + rand() * 2_500),
    }))
    .sort((a, b) => a.atMs - b.atMs);
  process.stderr.write(
    `${mode} schedule: ${schedule.map((s) => `${s.kind}@${(s.atMs / 1000).toFixed(1)}s(down ${s.downMs}ms)`).join(" ")}\n`,
  );
  const chaosErrors: string[] = [];
  const hit = async (s: (typeof schedule)[number]): Promise<void> => {
    if (s.kind === "nats-server") {
      const i = spec.natsNodes > 1 ? Math.floor(rand() * nats.nodes.length) : 0;
      const node = nats.nodes[i]!;
      const name = `${mode}: nats-server n${i + 1}`;
      note(name, "SIGKILL", "store kept");
      const back = outage("nats-server");
      await node.stop("SIGKILL");
      // a cluster node stays down longer: the other two carry the streams meanwhile
      const down = spec.natsNodes > 1 ? s.downMs * 4 : s.downMs;
      await sleep(down);
      await node.start();
      note(name, "restarted", `after ${down} ms`);
      back();
    } else if (s.kind === "postgres" && privatePg) {
      note(`${mode}: postgres`, "crash", "pg_ctl stop -m immediate");
      const back = outage("postgres");
      await privatePg.crash();
      await sleep(s.downMs);
      await privatePg.start();
      note(`${mode}: postgres`, "restarted", `after ${s.downMs} ms`);
      back();
    } else if (s.kind === "task" && killer) {
      // The next call a task makes: SIGKILL its process while the provider holds the call.
      const k = await killer.arm(60_000);
      note(
        `${mode}: task`,
        "SIGKILL",
        `pid ${k.pid} (${k.cellId} attempt ${k.attempt}) mid-call: its call ${k.call} held by the provider`,
      );
      outage("task")();
    } else {
      const p = s.kind === "gateway" ? gateways[Math.floor(rand() * gateways.length)]! : actors[s.kind]!;
      if (s.kind === "gateway") {
        // Hold the provider's answers for a while and kill once a few calls are held (up to 3 s).
        held = 0;
        holdUntil = Date.now() + 5_000;
        const until = Date.now() + 3_000;
        while (held < 4 && Date.now() < until) await sleep(50);
      }
      const pid = p.pid;
      const back = outage(s.kind === "gateway" || s.kind === "dispatcher" ? s.kind : "other");
      await p.kill("SIGKILL");
      note(
        p.name,
        "SIGKILL",
        `pid ${pid}${s.kind === "gateway" ? `, the provider holding ${held} calls` : ""}`,
      );
      await sleep(s.downMs);
      p.start();
      note(p.name, "restarted", `after ${s.downMs} ms, pid ${p.pid}`);
      back();
    }
  };
  // A kill must matter: it waits (up to 30 s) for model calls to be flowing, so the process dies with work in hand
  // (a plane recovering from the previous kill may be idle for a while).
  const busy = async (): Promise<void> => {
    const until = Date.now() + 30_000;
    while (Date.now() < until) {
      const before = provider.calls().length;
      await sleep(300);
      if (provider.calls().length > before) return;
    }
  };
  const chaos = (async () => {
    for (const s of schedule) {
      const wait = submittedAt + s.atMs - Date.now();
      if (wait > 0) await sleep(wait);
      if (s.kind !== "task") await busy();
      await hit(s).catch((err: unknown) => {
        chaosErrors.push(`${s.kind}: ${err instanceof Error ? err.message : String(err)}`);
        note(`${mode}: ${s.kind}`, "error", String(err));
      });
    }
  })();
  let chaosDone = false;
  void chaos.finally(() => {
    chaosDone = true;
  });

  // Follow the run until every cell is final (from PostgreSQL; errors while it is down are expected).
  let finished = false;
  let finalAt = 0;
  let last = "";
  let counts: Record<string, number> = {};
  while (Date.now() - submittedAt < waitMs) {
    await sleep(2_000);
    // A rejected run will never run: say why and stop waiting for it.
    const planned = await client.kv.progress.get(ProgressKeys.run(run)).catch(() => null);
    const verdict = planned && planned.length > 0 ? planned.json<{ phase?: string; message?: string }>() : {};
    if (verdict.phase === "rejected") {
      note(`${mode}: run`, "rejected", verdict.message ?? "");
      break;
    }
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
      if (total === totalCells && open === 0 && chaosDone) {
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
  note(`${mode}: run`, finished ? "finished" : "NOT finished", JSON.stringify(counts));
  // Calls a killed gateway replica held: settled at their reservation once it is known dead (60 s of silence), then
  // trued up to the provider's usage report once the run's last minute is complete in it, then into the ledger.
  if (finished) {
    const waitFrom = Date.now();
    let left = "";
    while (Date.now() - waitFrom < TRUE_UP_WAIT_MS) {
      left = await untrued(db, run).catch(() => "PostgreSQL unavailable");
      if (left === "") break;
      await sleep(5_000);
    }
    note(
      `${mode}: run`,
      left === "" ? "trued up" : "NOT trued up",
      left === "" ? `after ${Math.round((Date.now() - waitFrom) / 1000)} s` : left,
    );
  }

  const cellIds = (
    await db.query<{ cell_id: string }>("SELECT cell_id FROM run_state WHERE run_name = $1", [run])
  ).rows.map((r) => r.cell_id);
  const bySlug = cellsBySlug(cellIds);
  const res = await runChecks({
    mode,
    db,
    client,
    provider,
    upstreamKey: UPSTREAM_KEY,
    run,
    totalCells,
    finished,
    parallel: spec.parallel,
    budgetUsd: spec.budgetUsd,
    maxCostUsd: spec.maxCostUsd,
    attribute:
      spec.backend === "local"
        ? (body) => {
            const who = localCallOf(body);
            const cellId = who ? bySlug.get(who.cellSlug) : undefined;
            return who && cellId ? { cellId, attempt: who.attempt } : undefined;
          }
        : simCallOf,
    incidents,
    killedTasks: killer?.kills ?? [],
    balanced: balancer.served(),
  });
  checks.push(...res.checks);
  checks.push({
    name: `[${mode}] no process died unless the chaos killed it`,
    ok: crashes.length === 0,
    detail: crashes.length ? crashes.join("; ") : "none",
  });
  if (process.env.CHAOS_LOG_DIR) await dumpEvidence(join(logDir, "evidence.json"), db, run, provider);
  checks.push({
    name: `[${mode}] chaos schedule ran (every kill landed)`,
    ok: chaosErrors.length === 0,
    detail: chaosErrors.length
      ? chaosErrors.join("; ")
      : `${schedule.length} kills: ${schedule.map((s) => s.kind).join(", ")}`,
  });
  // This scenario's processes and servers go now; the next one starts its own.
  over = true;
  await Promise.allSettled(procs.map((p) => p.kill("SIGKILL")));
  await killMarked(MARK.name, MARK.value).catch(() => 0);
  await balancer.close().catch(() => {});
  await client.close().catch(() => {});
  await nats.cleanup().catch(() => {});
  await provider.close().catch(() => {});
  return res.figures;
}

/** With CHAOS_LOG_DIR: the provider's calls, the ledger and the gateway's spend log, for a failed check's autopsy. */
async function dumpEvidence(file: string, db: Db, run: string, provider: ScriptedProvider): Promise<void> {
  const q = async (sql: string) => (await db.query(sql, [run])).rows;
  const evidence = {
    provider: provider.calls().map((c) => ({
      index: c.index,
      status: c.status,
      outcome: c.outcome,
      costNanoUsd: c.costNanoUsd,
      prompt: JSON.stringify(c.body.messages ?? "").slice(0, 300),
    })),
    ledger: await q(
      "SELECT call_id, cell_id, attempt, status, http_status, cost_nano_usd, retries, started_at, created_at FROM ledger_calls WHERE run_name = $1 ORDER BY started_at",
    ),
    gateway: await q("SELECT * FROM gateway_spend_log WHERE run_name = $1 ORDER BY created_at"),
    results: await q(
      "SELECT cell_id, attempt, status, grade_status, error_message FROM run_results WHERE run_name = $1",
    ),
  };
  await writeFile(file, JSON.stringify(evidence, null, 1));
}

/** The sim's prompt: "fix <cell> attempt <n> (call <i>)". */
function simCallOf(body: unknown): { cellId: string; attempt: number } | undefined {
  const m = /fix (\S+) attempt (\d+) \(call/.exec(JSON.stringify(body));
  return m ? { cellId: m[1]!, attempt: Number(m[2]) } : undefined;
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

/** What is left before the run's ledger holds the provider's figures for every call: "" when nothing. */
async function untrued(db: Db, run: string): Promise<string> {
  const r = await db.query<{ status: string; n: string }>(
    `SELECT status, count(*)::text AS n FROM gateway_spend_log
      WHERE run_name = $1 AND status IN ('pending', 'lost', 'client_closed', 'orphaned') GROUP BY status`,
    [run],
  );
  const behind = (await runsWithTruedCalls(db)).includes(run);
  const parts = r.rows.map((x) => `${x.n} ${x.status}`);
  if (behind) parts.push("the ledger not yet settled to the trued figures");
  return parts.join(", ");
}
