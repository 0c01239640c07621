/**
 * bench:scale — 20,000 attempts in flight at once on the sim backend, held by one dispatcher and one
 * results-writer (with the planner) in this process, on a fresh nats-server and database (DATABASE_URL, else PGlite).
 * Each attempt lives BENCH_THINK_S (default 40 s, ±15 %); every 2 s the bench samples memory (RSS, heap), CPU
 * (this process, nats-server, whole machine), attempts in flight, and JetStream message rates. End-to-end latency
 * from attempt finish (the result's finishedAt) to durable row is measured in the results-writer: its database
 * handle is wrapped, and the commit of each transaction that inserts run_results stamps the cells it carried.
 *
 * Metered calls: BENCH_CALLS (default 0 = synthetic usage). With BENCH_CALLS=N each attempt makes N real calls (a
 * call every think/(N+1) s) through its own real shim to a scripted provider, and the ledger rows go through NATS
 * to the results-writer like in production. A real shim costs ~5 descriptors in the process hosting it and this
 * machine's hard limit is 20,000 per process, so the attempts are hosted by BENCH_WORKERS worker processes
 * (default one per 2,500 attempts; bench/sim-workers.ts) driven by the dispatcher through the LaunchBackend API.
 * The whole bench stops by itself (deadline BENCH_DEADLINE_S, default 540 s). Last line: one JSON object.
 */
import { startDispatcher } from "../actors/dispatcher/actor.js";
import { SimBackend } from "../actors/dispatcher/backends/sim.js";
import type { JobRef, LaunchBackend } from "../actors/dispatcher/backends/types.js";
import type { BudgetState } from "../actors/dispatcher/budget.js";
import { startPlanner } from "../actors/planner/actor.js";
import { startResultsWriter } from "../actors/results-writer/actor.js";
import { loadBenchSettings } from "../config/index.js";
import { createLogger, silentLogger } from "../lib/log.js";
import type { Plane } from "../plane/connect.js";
import { emptyUsage } from "../protocol/messages.js";
import { ProgressKeys, StateKeys, Subjects } from "../protocol/subjects.js";
import { Consumers } from "../protocol/topology.js";
import type { Db } from "../store/db.js";
import { machineCpuS, procCpuS, rssMbOf, startBenchPlane, streamBytes, streamSeqs } from "./common.js";
import { ForkedSimBackend, thinkMsFor } from "./sim-workers.js";

const { bench } = loadBenchSettings("scale");
const ATTEMPTS = bench.attempts;
const THINK_S = bench.thinkS;
const CALLS = bench.calls;
const DEADLINE_S = bench.deadlineS;
/** worker processes hosting the real shims (BENCH_CALLS > 0): ~2,500 attempts each keeps each under its fd limit */
const WORKERS = bench.workers;
const HARNESSES = 5;
const MODELS = 2;
const REPEATS = 2;
const TASKS = Math.ceil(ATTEMPTS / (HARNESSES * MODELS * REPEATS));

function pct(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

/**
 * The results-writer's database handle, wrapped: each transaction that inserts into run_results reports, once it
 * has committed, every cell id it bound as a parameter. Cell ids are content hashes, so a match is unambiguous.
 */
function stampingDb(
  db: Db,
  onDurable: (cellIds: string[], at: number) => void,
  isCell: (s: string) => boolean,
): Db {
  const watch = (tx: Db, seen: { ids: string[] | null }): Db => ({
    kind: tx.kind,
    close: () => tx.close(),
    async query(sql, params) {
      if (params && /insert\s+into\s+run_results/i.test(sql)) {
        seen.ids ??= [];
        for (const p of params) if (typeof p === "string" && isCell(p)) seen.ids.push(p);
      }
      return await tx.query(sql, params);
    },
    transaction: (fn) => tx.transaction((inner) => fn(watch(inner, seen))),
  });
  return {
    kind: db.kind,
    close: () => db.close(),
    query: (sql, params) => db.query(sql, params),
    async transaction(fn) {
      const seen: { ids: string[] | null } = { ids: null };
      const out = await db.transaction((tx) => fn(watch(tx, seen)));
      if (seen.ids) onDurable(seen.ids, Date.now());
      return out;
    },
  };
}

interface Sample {
  t: number;
  inFlight: number;
  durable: number;
  rssMb: number;
  heapMb: number;
  msgsPerS: number;
  /** RSS of the sim worker processes together (real shims) */
  workersRssMb: number;
}

async function main() {
  const started0 = Date.now();
  const bp = await startBenchPlane("bench-scale", TASKS, 5);
  const { nats, store, lib, actors, plane } = bp;
  let backend: LaunchBackend;
  let forked: ForkedSimBackend | undefined;
  try {
    const client = await plane("bench-client");
    // BENCH_LOG_LEVEL=warn (say): the actors' own account of what went wrong, on stderr.
    const log =
      bench.logLevel === "silent"
        ? silentLogger()
        : createLogger({ name: "bench-scale", level: bench.logLevel });
    const run = "bench-scale";

    // finish time per cell (from the result on the wire) and durable time (results-writer commit)
    const finishedAt = new Map<string, number>();
    const durableAt = new Map<string, number>();
    const latencies: number[] = [];
    let launched = 0;
    let finished = 0;
    /** results published on attempts.> for the run, counting repeats (the stream keeps one per message id) */
    let published = 0;
    const settled = new Set<string>();
    const settle = (cell: string) => {
      const f = finishedAt.get(cell);
      const d = durableAt.get(cell);
      if (f === undefined || d === undefined || settled.has(cell)) return;
      settled.add(cell);
      latencies.push(d - f);
    };
    const cellIds = new Set<string>();
    const sub = client.nc.subscribe(Subjects.attempts.all, {
      callback: (err, m) => {
        if (err) return;
        const r = m.json<{ run: string; cellId: string; finishedAt: string }>();
        if (r.run !== run) return;
        published++;
        if (finishedAt.has(r.cellId)) return; // a repeated publish of the same result: the first one counts
        finished++;
        finishedAt.set(r.cellId, Date.parse(r.finishedAt));
        settle(r.cellId);
      },
    });

    actors.push(
      await startPlanner({ plane: await plane("planner"), db: store.db, log, libraryRoots: [lib] }),
    );
    const dp = await plane("dispatcher");
    const mix = { PATCH_READY: 95, EMPTY_PATCH: 5 };
    const usagePerCall = { input: 1_000, output: 100 };
    const count = (ref: JobRef) => {
      if (ref.runName === run) {
        launched++;
        cellIds.add(ref.cellId);
      }
    };
    if (CALLS > 0) {
      // Real shims need ~5 descriptors per attempt: spread them over worker processes (see sim-workers.ts).
      forked = await ForkedSimBackend.start(WORKERS, nats.env, {
        calls: CALLS,
        thinkS: THINK_S,
        usagePerCall,
        mix,
      });
      const f = forked;
      backend = {
        name: f.name,
        async launch(refs) {
          for (const r of refs) count(r);
          return await f.launch(refs);
        },
        observe: (h) => f.observe(h),
        stop: (h, why) => f.stop(h, why),
        close: () => f.close(),
      };
    } else {
      backend = new SimBackend({
        plane: dp,
        calls: 0,
        thinkMs: (ref) => {
          count(ref);
          return thinkMsFor(ref.cellId, THINK_S);
        },
        mix,
        usagePerCall,
        syntheticUsage: {
          ...emptyUsage(),
          inputTokens: 10_000,
          outputTokens: 1_000,
          costNanoUsd: 45_000_000,
          calls: 10,
        },
      });
    }
    bp.backend = backend;
    const dispatcher = await startDispatcher({ plane: dp, db: store.db, log, backend });
    actors.push(dispatcher);
    const writerDb = stampingDb(
      store.db,
      (ids, at) => {
        for (const id of ids) {
          if (durableAt.has(id)) continue;
          durableAt.set(id, at);
          settle(id);
        }
      },
      (s) => cellIds.has(s),
    );
    actors.push(
      await startResultsWriter({
        plane: await plane("results-writer"),
        db: writerDb,
        log,
        waitForScores: false,
      }),
    );

    const natsPid = await bp.natsPid();
    const seqs0 = await streamSeqs(client);
    const total = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);
    const cpu0 = process.cpuUsage();
    const nats0 = await procCpuS(natsPid);
    const m0 = await machineCpuS();
    const t0 = performance.now();
    await client.js.publish(
      Subjects.runSubmit,
      JSON.stringify({
        name: run,
        harnesses: Array.from({ length: HARNESSES }, (_, i) => ({ name: `h${i + 1}`, adapter: "command" })),
        models: [{ name: "claude-sonnet-4-5" }, { name: "claude-haiku-4-5" }],
        tasks: ["*"],
        task_library_path: lib,
        repeats: REPEATS,
        unvalidated: true,
        parallel_runs: ATTEMPTS,
        budget_usd: 1_000_000,
      }),
    );

    const workerPids = forked?.pids() ?? [];
    const workersCpuS = async () => {
      let sum = 0;
      for (const pid of workerPids) sum += await procCpuS(pid);
      return sum;
    };
    const workers0 = await workersCpuS();
    let peakWorkersRss = 0;
    const samples: Sample[] = [];
    let lastSeqs = total(seqs0);
    let lastT = t0;
    let peakInFlight = 0;
    let peakAt = 0;
    let peakRss = 0;
    let peakHeap = 0;
    let fullAt: number | null = null;
    let phase = "";
    const deadline = started0 + DEADLINE_S * 1000;
    // Storage: the most each stream held at once (work queues drain as they are acked) and what it keeps at the end.
    const peakBytes = new Map<string, number>();
    for (;;) {
      await new Promise((r) => setTimeout(r, 2_000));
      const now = performance.now();
      const seqs = total(await streamSeqs(client));
      for (const [name, b] of await streamBytes(client))
        peakBytes.set(name, Math.max(peakBytes.get(name) ?? 0, b));
      const mem = process.memoryUsage();
      const inFlight = launched - finished;
      const s: Sample = {
        t: (now - t0) / 1000,
        inFlight,
        durable: latencies.length,
        rssMb: mem.rss / 2 ** 20,
        heapMb: mem.heapUsed / 2 ** 20,
        msgsPerS: (seqs - lastSeqs) / ((now - lastT) / 1000),
        workersRssMb: 0,
      };
      for (const pid of workerPids) s.workersRssMb += await rssMbOf(pid);
      peakWorkersRss = Math.max(peakWorkersRss, s.workersRssMb);
      lastSeqs = seqs;
      lastT = now;
      samples.push(s);
      if (inFlight > peakInFlight) {
        peakInFlight = inFlight;
        peakAt = s.t;
      }
      if (fullAt === null && inFlight >= ATTEMPTS) fullAt = s.t;
      peakRss = Math.max(peakRss, s.rssMb);
      peakHeap = Math.max(peakHeap, s.heapMb);
      console.log(
        `t=${s.t.toFixed(0).padStart(3)} s  in flight ${String(inFlight).padStart(5)}  launched ${launched}  finished ${finished}  durable ${latencies.length}  rss ${s.rssMb.toFixed(0)} MB  heap ${s.heapMb.toFixed(0)} MB${workerPids.length ? `  workers rss ${s.workersRssMb.toFixed(0)} MB` : ""}  ${s.msgsPerS.toFixed(0)} JetStream msg/s`,
      );
      const e = await client.kv.progress.get(ProgressKeys.run(run));
      phase = e && e.length > 0 ? e.json<{ phase: string }>().phase : "";
      if (phase === "finished") break;
      if (Date.now() > deadline) {
        console.log(`deadline reached with the run ${phase || "not started"}: stopping`);
        await explainUnfinished(client, store.db, run);
        break;
      }
    }
    const elapsedS = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const nodeCpuS = (cpu.user + cpu.system) / 1e6;
    const natsCpuS = (await procCpuS(natsPid)) - nats0;
    const simWorkersCpuS = (await workersCpuS()) - workers0;
    const machineS = (await machineCpuS()) - m0;
    const seqs1 = await streamSeqs(client);
    const perStream: Record<string, number> = {};
    for (const [name, seq] of seqs1) {
      const d = seq - (seqs0.get(name) ?? 0);
      if (d > 0) perStream[name] = d;
    }
    const msgs = total(seqs1) - total(seqs0);
    const perAttempt = (b: number) => Math.round(b / Math.max(1, finished));
    const bytesPerAttempt: Record<string, { peak: number; kept: number }> = {};
    for (const [name, kept] of await streamBytes(client)) {
      const peak = Math.max(peakBytes.get(name) ?? 0, kept);
      if (peak > 0) bytesPerAttempt[name] = { peak: perAttempt(peak), kept: perAttempt(kept) };
    }
    await sub.drain();
    const rows = Number(
      (
        await store.db.query<{ n: number }>(
          "SELECT count(*)::int AS n FROM run_results WHERE run_name = $1",
          [run],
        )
      ).rows[0]?.n ?? 0,
    );
    // Every try at a call is its own ledger row; the breakdown says what any rows beyond attempts × calls were.
    const ledgerByStatus: Record<string, number> = {};
    for (const r of (
      await store.db.query<{ status: string; retried: boolean; n: number }>(
        `SELECT status, COALESCE(retries, 0) > 0 AS retried, count(*)::int AS n
           FROM ledger_calls WHERE run_name = $1 GROUP BY 1, 2 ORDER BY 1, 2`,
        [run],
      )
    ).rows)
      ledgerByStatus[`${r.status}${r.retried ? " (retry)" : ""}`] = r.n;
    const ledgerRows = Object.values(ledgerByStatus).reduce((a, b) => a + b, 0);
    const lat = [...latencies].sort((a, b) => a - b);
    const held = samples.filter((x) => x.inFlight >= 0.95 * ATTEMPTS);
    const rssHeld = held.length ? Math.max(...held.map((x) => x.rssMb)) : peakRss;
    const heapHeld = held.length ? Math.max(...held.map((x) => x.heapMb)) : peakHeap;
    const workersRssHeld = held.length ? Math.max(...held.map((x) => x.workersRssMb)) : peakWorkersRss;
    const mode =
      CALLS > 0
        ? `${CALLS} metered calls per attempt through a real shim (one every ${(THINK_S / (CALLS + 1)).toFixed(1)} s)`
        : "calls: 0 + syntheticUsage (no shims: attempts report fixed usage)";
    console.log(
      `db ${store.db.kind}; ${ATTEMPTS} attempts of ~${THINK_S} s each; sim: ${mode}; run ${phase} after ${elapsedS.toFixed(1)} s`,
    );
    console.log(
      `in flight: peak ${peakInFlight} at t=${peakAt.toFixed(0)} s${fullAt === null ? "" : `, all ${ATTEMPTS} in flight from t=${fullAt.toFixed(0)} s`}; ${rows} durable rows`,
    );
    console.log(
      `memory (this process: planner + dispatcher + sim + results-writer): peak RSS ${peakRss.toFixed(0)} MB, peak heap ${peakHeap.toFixed(0)} MB; while ≥95 % in flight: RSS ${rssHeld.toFixed(0)} MB, heap ${heapHeld.toFixed(0)} MB${workerPids.length ? `; ${workerPids.length} sim workers (the harnesses and their shims): peak RSS ${peakWorkersRss.toFixed(0)} MB together, ${workersRssHeld.toFixed(0)} MB while ≥95 % in flight` : ""}`,
    );
    console.log(
      `CPU over ${elapsedS.toFixed(0)} s: this process ${nodeCpuS.toFixed(1)} s (${((100 * nodeCpuS) / elapsedS).toFixed(0)} % of a core), nats-server ${natsCpuS.toFixed(1)} s (${((100 * natsCpuS) / elapsedS).toFixed(0)} %),${workerPids.length ? ` sim workers ${simWorkersCpuS.toFixed(1)} s (${((100 * simWorkersCpuS) / elapsedS).toFixed(0)} %),` : ""} machine ${machineS.toFixed(1)} s of ${(2 * elapsedS).toFixed(0)}`,
    );
    console.log(
      `JetStream: ${msgs} messages, ${(msgs / elapsedS).toFixed(0)} msg/s average, ${Math.max(...samples.map((x) => x.msgsPerS)).toFixed(0)} peak (2 s window); ${Object.entries(
        perStream,
      )
        .map(([k, v]) => `${k} ${v}`)
        .join(", ")}`,
    );
    console.log(
      `storage per attempt, bytes (most held at once / kept at the end): ${Object.entries(bytesPerAttempt)
        .map(([k, v]) => `${k} ${v.peak} / ${v.kept}`)
        .join(", ")}`,
    );
    console.log(
      `attempt results published on attempts.> (seen by a core subscriber): ${published} for ${finished} attempts`,
    );
    if (CALLS > 0)
      console.log(
        `ledger: ${ledgerRows} rows for ${rows} attempts × ${CALLS} calls = ${rows * CALLS}; by status: ${Object.entries(
          ledgerByStatus,
        )
          .map(([k, v]) => `${k} ${v}`)
          .join(", ")}`,
      );
    console.log(
      `attempt finish → durable row (${lat.length} attempts): p50 ${pct(lat, 50)} ms, p90 ${pct(lat, 90)} ms, p99 ${pct(lat, 99)} ms, max ${lat.at(-1) ?? Number.NaN} ms`,
    );
    console.log(
      JSON.stringify({
        db: store.db.kind,
        attempts: ATTEMPTS,
        think_s: THINK_S,
        sim_calls_per_attempt: CALLS,
        run_phase: phase,
        elapsed_s: Number(elapsedS.toFixed(1)),
        peak_in_flight: peakInFlight,
        all_in_flight_at_s: fullAt,
        durable_rows: rows,
        peak_rss_mb: Math.round(peakRss),
        peak_heap_mb: Math.round(peakHeap),
        cpu_s_node: Number(nodeCpuS.toFixed(1)),
        cpu_s_nats: Number(natsCpuS.toFixed(1)),
        sim_workers: workerPids.length,
        sim_workers_cpu_s: Number(simWorkersCpuS.toFixed(1)),
        sim_workers_peak_rss_mb: Math.round(peakWorkersRss),
        sim_workers_rss_held_mb: Math.round(workersRssHeld),
        cpu_s_machine: Number(machineS.toFixed(1)),
        jetstream_msgs: msgs,
        jetstream_msgs_per_s: Math.round(msgs / elapsedS),
        jetstream_msgs_per_stream: perStream,
        bytes_per_attempt: bytesPerAttempt,
        attempt_result_publishes: published,
        ledger_rows: ledgerRows,
        ledger_rows_by_status: ledgerByStatus,
        finish_to_row_ms_p50: pct(lat, 50),
        finish_to_row_ms_p99: pct(lat, 99),
        finish_to_row_ms_max: lat.at(-1) ?? null,
        latency_samples: lat.length,
      }),
    );
    return phase === "finished" && rows === ATTEMPTS;
  } finally {
    await bp.close();
  }
}

const watchdog = setTimeout(
  () => {
    console.error("bench:scale: overall deadline passed");
    process.exit(2);
  },
  (DEADLINE_S + 60) * 1000,
);
watchdog.unref();
const ok = await main();
process.exit(ok ? 0 : 1);

/** Why a run did not finish: its cells not final, each with its launch record, claim and budget entry; the consumers. */
async function explainUnfinished(client: Plane, db: Db, run: string): Promise<void> {
  const open = await db.query<{ cell_id: string; status: string }>(
    "SELECT cell_id, status FROM run_state WHERE run_name = $1 AND status IN ('pending', 'running') ORDER BY cell_id LIMIT 10",
    [run],
  );
  const budget = (await client.kv.budgets.get(StateKeys.budget(run)))?.json<BudgetState>();
  console.log(
    `not final: ${open.rows.length}${open.rows.length === 10 ? "+" : ""} cells; budget open entries ${Object.keys(budget?.open ?? {}).length}`,
  );
  for (const r of open.rows) {
    const cell = (await client.kv.budgets.get(StateKeys.cellLaunch(run, r.cell_id)))?.string() ?? "none";
    const latest = cell === "none" ? 0 : (JSON.parse(cell) as { latest: number }).latest;
    const claim = (await client.kv.budgets.get(StateKeys.claim(run, r.cell_id, latest)))?.string() ?? "none";
    console.log(
      `  ${r.cell_id} ${r.status}: launch record ${cell}; claim of attempt ${latest} ${claim}; budget entry ${JSON.stringify(budget?.open[r.cell_id] ?? null)}`,
    );
  }
  for (const c of [Consumers.dispatcher, Consumers.dispatcherAttempts]) {
    const i = await client.jsm.consumers.info(c.stream, c.durable).catch(() => null);
    console.log(
      `  consumer ${c.durable}: pending ${i?.num_pending}, ack pending ${i?.num_ack_pending}, redelivered ${i?.num_redelivered}`,
    );
  }
}
