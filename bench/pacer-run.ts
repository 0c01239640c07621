import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { WorkerArgs } from "./pacer-worker.js";

/** Spawning pacer workers and collecting their bins: shared by bench/pacer.ts and the integration test. */

const WORKER = fileURLToPath(new URL("./pacer-worker.ts", import.meta.url));

export interface WorkerHandle {
  id: string;
  proc: ChildProcess;
  /** admissions per bin index */
  bins: Map<number, number>;
  waits: Map<number, number>;
  done: Promise<void>;
}

export function spawnWorker(args: WorkerArgs): WorkerHandle {
  const proc = spawn(process.execPath, ["--import", "tsx", WORKER, JSON.stringify(args)], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  const h: WorkerHandle = { id: args.id, proc, bins: new Map(), waits: new Map(), done: Promise.resolve() };
  let stderr = "";
  proc.stderr?.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  const rl = createInterface({ input: proc.stdout! });
  rl.on("line", (line) => {
    let m: { bin?: number; n?: number; done?: boolean; waits?: Record<string, number> };
    try {
      m = JSON.parse(line);
    } catch {
      return;
    }
    if (m.bin !== undefined && m.n !== undefined) h.bins.set(m.bin, (h.bins.get(m.bin) ?? 0) + m.n);
    if (m.done && m.waits)
      for (const [k, v] of Object.entries(m.waits)) h.waits.set(Number(k), (h.waits.get(Number(k)) ?? 0) + v);
  });
  h.done = new Promise<void>((resolve, reject) => {
    proc.once("exit", (code, signal) => {
      if (code === 0 || signal === "SIGKILL") resolve();
      else reject(new Error(`pacer worker ${args.id} exited ${code ?? signal}:\n${stderr}`));
    });
  });
  return h;
}

/** Admissions of all workers in bins [fromBin, toBin). */
export function countBins(workers: WorkerHandle[], fromBin: number, toBin: number): number {
  let n = 0;
  for (const w of workers) for (const [bin, c] of w.bins) if (bin >= fromBin && bin < toBin) n += c;
  return n;
}

export function percentiles(workers: WorkerHandle[], ps: number[]): number[] {
  const all = new Map<number, number>();
  for (const w of workers) for (const [k, v] of w.waits) all.set(k, (all.get(k) ?? 0) + v);
  const keys = [...all.keys()].sort((a, b) => a - b);
  const total = [...all.values()].reduce((a, b) => a + b, 0);
  return ps.map((p) => {
    const target = Math.ceil(total * p);
    let seen = 0;
    for (const k of keys) {
      seen += all.get(k)!;
      if (seen >= target) return k;
    }
    return keys[keys.length - 1] ?? 0;
  });
}
