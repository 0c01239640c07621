/**
 * What the plane benches (plan, plane, scale) share: figures read from /proc, a fresh nats-server, database and
 * task library with planes opened by name, and the two ceilings a run is measured against.
 */
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Actor } from "../actors/runtime/actor.js";
import { openPlane, type Plane } from "../plane/connect.js";
import type { Db } from "../store/db.js";
import { insertPendingCells } from "../store/results.js";
import { type FreshDb, freshDb } from "../test/helpers/db.js";
import { startNats, type TestNats } from "../test/helpers/nats.js";

/** CPU seconds (user + system) of a process, from /proc (Linux); NaN when it is unknown or gone. */
export async function procCpuS(pid: number | undefined): Promise<number> {
  if (!pid) return Number.NaN;
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12])) / 100; // utime, stime in clock ticks (USER_HZ = 100)
  } catch {
    return Number.NaN;
  }
}

/** The pid of the process whose command line mentions `needle` (the nats-server's config file). */
export async function pidOf(needle: string): Promise<number | undefined> {
  for (const d of await readdir("/proc").catch(() => [] as string[])) {
    if (!/^\d+$/.test(d)) continue;
    const cmd = await readFile(`/proc/${d}/cmdline`, "utf8").catch(() => "");
    if (cmd.includes(needle)) return Number(d);
  }
  return undefined;
}

/** Busy CPU seconds of the whole machine (all cores), from /proc/stat; NaN where there is none. */
export async function machineCpuS(): Promise<number> {
  try {
    const line = (await readFile("/proc/stat", "utf8")).split("\n")[0] ?? "";
    const v = line.trim().split(/\s+/).slice(1).map(Number);
    const idle = (v[3] ?? 0) + (v[4] ?? 0);
    return (v.reduce((a, b) => a + b, 0) - idle) / 100;
  } catch {
    return Number.NaN;
  }
}

/** RSS of a process in MB, from /proc (NaN when it is gone). */
export async function rssMbOf(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8").catch(() => "");
  const m = /VmRSS:\s+(\d+) kB/.exec(status);
  return m ? Number(m[1]) / 1024 : Number.NaN;
}

/** Every stream's last sequence (streams, KV buckets and object stores alike). */
export async function streamSeqs(plane: Plane): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for await (const s of plane.jsm.streams.list()) out.set(s.config.name, s.state.last_seq);
  return out;
}

/** Bytes each stream (KV buckets and the object store included) holds now. */
export async function streamBytes(plane: Plane): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for await (const s of plane.jsm.streams.list()) out.set(s.config.name, s.state.bytes);
  return out;
}

/** A bench's own plane: nats-server, database, a task library; `close()` stops what it started, actors first. */
export interface BenchPlane {
  nats: TestNats;
  store: FreshDb;
  /** the task library folder: `tasks` task files, ids `task-0000…` */
  lib: string;
  /** stopped by close(), last started first */
  actors: Actor[];
  /** closed by close(), after the actors */
  backend?: { close(): Promise<void> };
  /** open a plane connection under `name`; close() closes it */
  plane(name: string): Promise<Plane>;
  /** the nats-server's pid, for its CPU */
  natsPid(): Promise<number | undefined>;
  close(): Promise<void>;
}

export async function startBenchPlane(name: string, tasks: number, idWidth: number): Promise<BenchPlane> {
  const nats = await startNats();
  const store = await freshDb(name);
  const lib = await mkdtemp(join(tmpdir(), `ef-${name}-lib-`));
  const planes: Plane[] = [];
  const bp: BenchPlane = {
    nats,
    store,
    lib,
    actors: [],
    async plane(n) {
      const p = await openPlane({ nats: nats.settings, name: n });
      planes.push(p);
      return p;
    },
    natsPid: () => pidOf(nats.nodes[0]?.spec.configFile ?? "nats.conf"),
    async close() {
      for (const a of bp.actors.reverse()) await a.stop().catch(() => {});
      bp.actors.length = 0;
      await bp.backend?.close().catch(() => {});
      for (const p of planes) await p.close().catch(() => {});
      await store.cleanup().catch(() => {});
      await nats.cleanup().catch(() => {});
      await rm(lib, { recursive: true, force: true });
    },
  };
  try {
    for (let i = 0; i < tasks; i++)
      await writeFile(join(lib, `t${i}.yaml`), `id: task-${String(i).padStart(idWidth, "0")}\n`);
  } catch (err) {
    await bp.close();
    throw err;
  }
  return bp;
}

/** Ceiling 1: ms to publish `n` messages of a cell's size, pipelined, to a scratch stream. */
export async function measurePublishCeiling(plane: Plane, n: number): Promise<number> {
  await plane.jsm.streams.add({ name: "BENCH_CEILING", subjects: ["bench.ceiling.>"] });
  const body = new TextEncoder().encode("x".repeat(420));
  const t1 = performance.now();
  let pending: Promise<unknown>[] = [];
  for (let i = 0; i < n; i++) {
    pending.push(plane.js.publish(`bench.ceiling.${i % 10}`, body, { msgID: `c${i}` }));
    if (pending.length >= 2000) {
      await Promise.all(pending);
      pending = [];
    }
  }
  await Promise.all(pending);
  return performance.now() - t1;
}

/** Ceiling 2: ms for one batched INSERT of `n` run_state rows. */
export async function measureInsertCeiling(db: Db, n: number): Promise<number> {
  const ids = Array.from({ length: n }, (_, i) => `ceiling-cell-${i}`);
  const t2 = performance.now();
  await insertPendingCells(db, "ceiling", ids);
  return performance.now() - t2;
}
