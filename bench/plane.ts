/**
 * bench:plane — a 20,000-cell run end to end: planner → dispatcher (sim backend) → results-writer, on a fresh
 * nats-server and a fresh database (DATABASE_URL, else PGlite), all actors in this process.
 *  - cells/s from submit to the run's `finished` progress phase;
 *  - JetStream messages per cell, from every stream's sequence before and after (cells, attempts, ledger, grade
 *    jobs, events, and the KV buckets and object store, which are streams too);
 *  - rows/s into the database (run_state, run_results, ledger_calls, phase_results of the run);
 *  - against two ceilings measured in the same run on the same server and database: pipelined JetStream publish of
 *    as many messages as the run stored, and batched INSERT of as many run_state rows.
 * BENCH_CALLS (default 0): metered calls per attempt through a real shim to the scripted provider; 0 = no calls,
 * synthetic usage. The default is 0 because a shim per attempt (an HTTP server, a connection pool and a progress
 * KV handle started and closed for one call) dominates: with 1 call the 20,000-cell run did not finish in 9 minutes
 * on this machine, while the plane itself moves the same run in well under a minute. BENCH_CELLS_REPEATS / BENCH_PARALLEL tune the size. Last line: one JSON object.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startDispatcher } from "../actors/dispatcher/actor.js";
import { SimBackend } from "../actors/dispatcher/backends/sim.js";
import { startPlanner } from "../actors/planner/actor.js";
import { startResultsWriter } from "../actors/results-writer/actor.js";
import type { Actor } from "../actors/runtime/actor.js";
import { openPlane, type Plane } from "../actors/runtime/connect.js";
import { silentLogger } from "../protocol/log.js";
import { ProgressKeys, Subjects } from "../protocol/subjects.js";
import { insertPendingCells } from "../store/results.js";
import { freshDb } from "../test/helpers/db.js";
import { startNats } from "../test/helpers/nats.js";

const CALLS = Number(process.env.BENCH_CALLS ?? "0");
const REPEATS = Number(process.env.BENCH_REPEATS ?? "2"); // 1,000 tasks × 5 harnesses × 2 models × repeats
const PARALLEL = Number(process.env.BENCH_PARALLEL ?? "2000");
const TASKS = 1000;
const TIMEOUT_MS = Number(process.env.BENCH_TIMEOUT_S ?? "540") * 1000;

/** CPU seconds (user + system) of a process, from /proc (Linux); null elsewhere. */
async function procCpuS(pid: number | undefined): Promise<number | null> {
  if (!pid) return null;
  try {
    const { readFile } = await import("node:fs/promises");
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / 100; // utime, stime in clock ticks (USER_HZ = 100)
  } catch {
    return null;
  }
}

/** The pid of the process whose command line mentions `needle` (the nats-server's config file). */
async function pidOf(needle: string): Promise<number | undefined> {
  const { readdir, readFile } = await import("node:fs/promises");
  for (const d of await readdir("/proc").catch(() => [] as string[])) {
    if (!/^\d+$/.test(d)) continue;
    const cmd = await readFile(`/proc/${d}/cmdline`, "utf8").catch(() => "");
    if (cmd.includes(needle)) return Number(d);
  }
  return undefined;
}

/** Busy CPU seconds of the whole machine (all cores), from /proc/stat. */
async function machineCpuS(): Promise<number | null> {
  try {
    const { readFile } = await import("node:fs/promises");
    const line = (await readFile("/proc/stat", "utf8")).split("\n")[0] ?? "";
    const v = line.trim().split(/\s+/).slice(1).map(Number);
    const idle = (v[3] ?? 0) + (v[4] ?? 0);
    return (v.reduce((a, b) => a + b, 0) - idle) / 100;
  } catch {
    return null;
  }
}

/** Every stream's last sequence (streams, KV buckets and object stores alike). */
async function streamSeqs(plane: Plane): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for await (const s of plane.jsm.streams.list()) out.set(s.config.name, s.state.last_seq);
  return out;
}

async function main() {
  const nats = await startNats();
  const store = await freshDb("bench-plane");
  const lib = await mkdtemp(join(tmpdir(), "ef-bench-plane-lib-"));
  const planes: Plane[] = [];
  const actors: Actor[] = [];
  let backend: SimBackend | undefined;
  try {
    for (let i = 0; i < TASKS; i++)
      await writeFile(join(lib, `t${i}.yaml`), `id: task-${String(i).padStart(4, "0")}\n`);
    const plane = async (name: string) => {
      const p = await openPlane({ servers: nats.url, name });
      planes.push(p);
      return p;
    };
    const client = await plane("bench-client");
    const log = silentLogger();
    actors.push(await startPlanner({ plane: await plane("planner"), db: store.db, log }));
    const dp = await plane("dispatcher");
    backend = new SimBackend({
      plane: dp,
      calls: CALLS,
      thinkMs: 20,
      // mostly PATCH_READY; a few empty patches (no grade job) as in a real run
      mix: { PATCH_READY: 95, EMPTY_PATCH: 5 },
      usagePerCall: { input: 1_000, output: 100 },
      ...(CALLS === 0
        ? {
            syntheticUsage: {
              inputTokens: 1_000,
              outputTokens: 100,
              cacheReadTokens: 0,
              cacheWriteTokens: 0,
              reasoningTokens: 0,
              costNanoUsd: 4_500_000,
              calls: 1,
            },
          }
        : {}),
    });
    actors.push(await startDispatcher({ plane: dp, db: store.db, log, backend }));
    // No grader runs here: `finished` must not wait for grades of the PATCH_READY attempts.
    actors.push(
      await startResultsWriter({
        plane: await plane("results-writer"),
        db: store.db,
        log,
        waitForScores: false,
      }),
    );

    const config = (name: string, tasks: string[], repeats: number) =>
      JSON.stringify({
        name,
        harnesses: ["h1", "h2", "h3", "h4", "h5"].map((n) => ({ name: n, adapter: "command" })),
        models: [{ name: "claude-sonnet-4-5" }, { name: "claude-haiku-4-5" }],
        tasks,
        task_library_path: lib,
        repeats,
        parallel_runs: PARALLEL,
        budget_usd: 1_000_000,
      });
    const finished = async (run: string, deadlineMs: number) => {
      for (;;) {
        const e = await client.kv.progress.get(ProgressKeys.run(run));
        if (e && e.length > 0) {
          const p = e.json<{ phase: string; message: string }>();
          if (p.phase === "finished") return p.message;
          if (p.phase === "rejected" || p.phase === "cancelled") throw new Error(`run ${run}: ${p.message}`);
        }
        if (Date.now() > deadlineMs)
          throw new Error(`run ${run} did not finish in time (${e?.string() ?? ""})`);
        await new Promise((r) => setTimeout(r, 100));
      }
    };

    // Warm-up: a 100-cell run, so connections, consumers and the scripted provider are up before measuring.
    const warmTasks = Array.from({ length: 10 }, (_, i) => `task-${String(i).padStart(4, "0")}`);
    await client.js.publish(Subjects.runSubmit, config("warm", warmTasks, 1));
    await finished("warm", Date.now() + 120_000);

    const run = "bench-plane";
    const before = await streamSeqs(client);
    const cpu0 = process.cpuUsage();
    const natsPid = await pidOf(nats.nodes[0]?.spec.configFile ?? "nats.conf");
    const nats0 = await procCpuS(natsPid);
    const m0 = await machineCpuS();
    const t0 = performance.now();
    await client.js.publish(Subjects.runSubmit, config(run, ["*"], REPEATS));
    const message = await finished(run, Date.now() + TIMEOUT_MS);
    const elapsedMs = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const natsCpuS = (await procCpuS(natsPid)) ?? Number.NaN;
    const machineS = (await machineCpuS()) ?? Number.NaN;
    const after = await streamSeqs(client);

    const perStream: Record<string, number> = {};
    let msgs = 0;
    for (const [name, seq] of after) {
      const d = seq - (before.get(name) ?? 0);
      if (d > 0) perStream[name] = d;
      msgs += d;
    }
    const count = async (table: string) =>
      Number(
        (
          await store.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table} WHERE run_name = $1`, [
            run,
          ])
        ).rows[0]?.n ?? 0,
      );
    const rows: Record<string, number> = {
      run_state: await count("run_state"),
      run_results: await count("run_results"),
      ledger_calls: await count("ledger_calls"),
      phase_results: await count("phase_results"),
    };
    const cells = rows.run_state ?? 0;
    const totalRows = Object.values(rows).reduce((a, b) => a + b, 0);
    const status = await store.db.query<{ status: string; n: number }>(
      "SELECT status, count(*)::int AS n FROM run_results WHERE run_name = $1 GROUP BY status ORDER BY status",
      [run],
    );

    for (const a of actors.reverse()) await a.stop();
    actors.length = 0;

    // Ceiling 1: pipelined JetStream publish of as many messages as the run stored, to a scratch stream.
    await client.jsm.streams.add({ name: "BENCH_CEILING", subjects: ["bench.ceiling.>"] });
    const body = new TextEncoder().encode("x".repeat(420));
    const t1 = performance.now();
    let pending: Promise<unknown>[] = [];
    for (let i = 0; i < msgs; i++) {
      pending.push(client.js.publish(`bench.ceiling.${i % 10}`, body, { msgID: `c${i}` }));
      if (pending.length >= 2000) {
        await Promise.all(pending);
        pending = [];
      }
    }
    await Promise.all(pending);
    const publishCeilingMs = performance.now() - t1;

    // Ceiling 2: batched INSERT of as many run_state rows as the run wrote rows.
    const ids = Array.from({ length: totalRows }, (_, i) => `ceiling-cell-${i}`);
    const t2 = performance.now();
    await insertPendingCells(store.db, "ceiling", ids);
    const insertCeilingMs = performance.now() - t2;

    const s = elapsedMs / 1000;
    const publishCeiling = msgs / (publishCeilingMs / 1000);
    const insertCeiling = totalRows / (insertCeilingMs / 1000);
    const msgRate = msgs / s;
    const rowRate = totalRows / s;
    // Doing the run's messages and rows one after the other at the ceiling rates: the fastest this could go.
    const serialCeilingMs = publishCeilingMs + insertCeilingMs;
    const mode =
      CALLS > 0
        ? `${CALLS} metered call(s) per attempt through a real shim to the scripted provider`
        : "calls: 0 + syntheticUsage (no shim, no ledger rows)";
    console.log(`db ${store.db.kind}; sim: ${mode}; parallel_runs ${PARALLEL}`);
    console.log(`run: ${message}`);
    console.log(
      `end to end ${cells} cells in ${s.toFixed(1)} s = ${(cells / s).toFixed(0)} cells/s; results by status: ${status.rows
        .map((r) => `${r.status} ${r.n}`)
        .join(", ")}`,
    );
    console.log(
      `JetStream: ${msgs} messages = ${(msgs / cells).toFixed(2)} per cell (${Object.entries(perStream)
        .map(([k, v]) => `${k} ${(v / cells).toFixed(2)}`)
        .join(", ")}) = ${msgRate.toFixed(0)} msg/s`,
    );
    console.log(
      `database: ${totalRows} rows (${Object.entries(rows)
        .map(([k, v]) => `${k} ${v}`)
        .join(", ")}) = ${rowRate.toFixed(0)} rows/s (inserted; run_state rows are also updated twice)`,
    );
    console.log(
      `ceilings in the same run: JetStream pipelined publish ${publishCeiling.toFixed(0)} msg/s (run at ${(msgRate / publishCeiling).toFixed(3)} of it), batched INSERT ${insertCeiling.toFixed(0)} rows/s (run at ${(rowRate / insertCeiling).toFixed(3)} of it); serial ceiling time ${(serialCeilingMs / 1000).toFixed(1)} s vs run ${s.toFixed(1)} s`,
    );
    console.log(
      `CPU during the run: this process (all actors + sim) ${((cpu.user + cpu.system) / 1e6).toFixed(1)} s, nats-server ${(natsCpuS - (nats0 ?? 0)).toFixed(1)} s, whole machine ${(machineS - (m0 ?? 0)).toFixed(1)} s of ${(2 * s).toFixed(1)} available`,
    );
    console.log(
      JSON.stringify({
        db: store.db.kind,
        sim_calls_per_attempt: CALLS,
        parallel_runs: PARALLEL,
        cells,
        elapsed_s: Number(s.toFixed(2)),
        cells_per_s: Math.round(cells / s),
        jetstream_msgs: msgs,
        jetstream_msgs_per_cell: Number((msgs / cells).toFixed(2)),
        jetstream_msgs_per_cell_by_stream: Object.fromEntries(
          Object.entries(perStream).map(([k, v]) => [k, Number((v / cells).toFixed(3))]),
        ),
        jetstream_msgs_per_s: Math.round(msgRate),
        db_rows: totalRows,
        db_rows_per_s: Math.round(rowRate),
        publish_ceiling_msgs_per_s: Math.round(publishCeiling),
        insert_ceiling_rows_per_s: Math.round(insertCeiling),
        msgs_vs_publish_ceiling: Number((msgRate / publishCeiling).toFixed(3)),
        rows_vs_insert_ceiling: Number((rowRate / insertCeiling).toFixed(3)),
        run_vs_serial_ceiling: Number((serialCeilingMs / elapsedMs).toFixed(3)),
        cpu_s_node: Number(((cpu.user + cpu.system) / 1e6).toFixed(1)),
        cpu_s_nats: Number((natsCpuS - (nats0 ?? 0)).toFixed(1)),
        cpu_s_machine: Number((machineS - (m0 ?? 0)).toFixed(1)),
      }),
    );
  } finally {
    for (const a of actors.reverse()) await a.stop().catch(() => {});
    await backend?.close().catch(() => {});
    for (const p of planes) await p.close().catch(() => {});
    await store.cleanup().catch(() => {});
    await nats.cleanup().catch(() => {});
    await rm(lib, { recursive: true, force: true });
  }
}

const watchdog = setTimeout(() => {
  console.error("bench:plane: overall deadline passed");
  process.exit(2);
}, TIMEOUT_MS + 120_000);
watchdog.unref();
await main();
process.exit(0);
