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
import { startDispatcher } from "../actors/dispatcher/actor.js";
import { SimBackend } from "../actors/dispatcher/backends/sim.js";
import { startPlanner } from "../actors/planner/actor.js";
import { startResultsWriter } from "../actors/results-writer/actor.js";
import { loadBenchSettings } from "../config/index.js";
import { silentLogger } from "../lib/log.js";
import { emptyUsage } from "../protocol/messages.js";
import { ProgressKeys, Subjects } from "../protocol/subjects.js";
import {
  machineCpuS,
  measureInsertCeiling,
  measurePublishCeiling,
  procCpuS,
  startBenchPlane,
  streamSeqs,
} from "./common.js";

const { bench } = loadBenchSettings("plane");
const CALLS = bench.calls;
const REPEATS = bench.repeats; // 1,000 tasks × 5 harnesses × 2 models × repeats
const PARALLEL = bench.parallel;
const TASKS = 1000;
const TIMEOUT_MS = bench.timeoutS * 1000;

async function main() {
  const bp = await startBenchPlane("bench-plane", TASKS, 4);
  const { store, lib, actors, plane } = bp;
  try {
    const client = await plane("bench-client");
    const log = silentLogger();
    actors.push(
      await startPlanner({ plane: await plane("planner"), db: store.db, log, libraryRoots: [lib] }),
    );
    const dp = await plane("dispatcher");
    const backend = new SimBackend({
      plane: dp,
      calls: CALLS,
      thinkMs: 20,
      // mostly PATCH_READY; a few empty patches (no grade job) as in a real run
      mix: { PATCH_READY: 95, EMPTY_PATCH: 5 },
      usagePerCall: { input: 1_000, output: 100 },
      ...(CALLS === 0
        ? {
            syntheticUsage: {
              ...emptyUsage(),
              inputTokens: 1_000,
              outputTokens: 100,
              costNanoUsd: 4_500_000,
              calls: 1,
            },
          }
        : {}),
    });
    bp.backend = backend;
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
        unvalidated: true,
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
    const natsPid = await bp.natsPid();
    const nats0 = await procCpuS(natsPid);
    const m0 = await machineCpuS();
    const t0 = performance.now();
    await client.js.publish(Subjects.runSubmit, config(run, ["*"], REPEATS));
    const message = await finished(run, Date.now() + TIMEOUT_MS);
    const elapsedMs = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const natsCpuS = await procCpuS(natsPid);
    const machineS = await machineCpuS();
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

    // The ceilings: as many messages as the run stored, as many run_state rows as the run wrote rows.
    const publishCeilingMs = await measurePublishCeiling(client, msgs);
    const insertCeilingMs = await measureInsertCeiling(store.db, totalRows);

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
      `CPU during the run: this process (all actors + sim) ${((cpu.user + cpu.system) / 1e6).toFixed(1)} s, nats-server ${(natsCpuS - nats0).toFixed(1)} s, whole machine ${(machineS - m0).toFixed(1)} s of ${(2 * s).toFixed(1)} available`,
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
        cpu_s_nats: Number((natsCpuS - nats0).toFixed(1)),
        cpu_s_machine: Number((machineS - m0).toFixed(1)),
      }),
    );
  } finally {
    await bp.close();
  }
}

const watchdog = setTimeout(() => {
  console.error("bench:plane: overall deadline passed");
  process.exit(2);
}, TIMEOUT_MS + 120_000);
watchdog.unref();
await main();
process.exit(0);
