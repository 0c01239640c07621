/**
 * The sim backend spread over worker processes, for bench:scale with real metered calls. A real shim per attempt
 * holds a listening socket, the harness's connection to it (both ends) and its connection to the provider: about
 * five descriptors per attempt in the process that hosts them, and this machine's hard limit is 20,000 per
 * process. So the attempts live in N workers (each a SimBackend on its own NATS connection, with its own scripted
 * provider), while the dispatcher, planner and results-writer stay in the bench's process and drive the workers
 * through this LaunchBackend over IPC, exactly as they drive any backend.
 */
import { type ChildProcess, fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { JobRef, LaunchBackend, StopClass, TaskState } from "../actors/dispatcher/backends/types.js";
import { loadBenchSettings } from "../config/index.js";
import { natsFromEnv } from "../test/helpers/nats.js";

const SELF = fileURLToPath(import.meta.url);

export interface SimWorkerOptions {
  /** metered calls per attempt */
  calls: number;
  /** mean attempt duration; each cell gets a fixed ±15 % around it */
  thinkS: number;
  usagePerCall: { input: number; output: number };
  mix: Record<string, number>;
}

/** ±15 % around thinkS, fixed per cell (the same in every process). */
export function thinkMsFor(cellId: string, thinkS: number): number {
  let h = 0;
  for (const ch of cellId) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
  return Math.round(thinkS * 1000 * (0.85 + 0.3 * ((h % 1000) / 1000)));
}

type Op =
  | { op: "launch"; refs: JobRef[] }
  | { op: "observe"; handles: string[] }
  | { op: "stop"; handles: string[]; reason: string }
  | { op: "close" };
type Request = Op & { id: number };
type Reply = { id: number; ok: true; value: unknown } | { id: number; ok: false; error: string };

interface Worker {
  proc: ChildProcess;
  /** attempts launched there and not yet seen stopped */
  live: number;
}

export class ForkedSimBackend implements LaunchBackend {
  readonly name = "sim";
  private readonly workers: Worker[] = [];
  private readonly waiting = new Map<number, (r: Reply) => void>();
  private seq = 0;

  private constructor() {}

  static async start(
    n: number,
    natsEnv: { NATS_URL: string; NATS_CREDS: string },
    opts: SimWorkerOptions,
  ): Promise<ForkedSimBackend> {
    const b = new ForkedSimBackend();
    const { inheritedEnv } = loadBenchSettings("sim-worker").host;
    await Promise.all(
      Array.from({ length: n }, async (_, i) => {
        const proc = fork(SELF, ["--sim-worker", String(i)], {
          execArgv: ["--import", "tsx"],
          env: { ...inheritedEnv, ...natsEnv, EF_SIM_WORKER: JSON.stringify(opts) },
          stdio: ["ignore", "inherit", "inherit", "ipc"],
        });
        proc.on("message", (m: Reply | "ready") => {
          if (m === "ready") return;
          const w = b.waiting.get(m.id);
          b.waiting.delete(m.id);
          w?.(m);
        });
        await new Promise<void>((resolve, reject) => {
          proc.once("message", () => resolve());
          proc.once("exit", (code) =>
            reject(new Error(`sim worker ${i} exited ${code} before it was ready`)),
          );
        });
        proc.on("exit", (code, sig) => {
          for (const [id, w] of b.waiting) {
            b.waiting.delete(id);
            w({ id, ok: false, error: `sim worker ${i} exited (${code ?? sig})` });
          }
        });
        b.workers[i] = { proc, live: 0 };
      }),
    );
    return b;
  }

  /** Process ids of the workers (the bench adds their CPU and memory to its figures). */
  pids(): number[] {
    return this.workers.map((w) => w.proc.pid ?? 0).filter((p) => p > 0);
  }

  private call(i: number, req: Op): Promise<unknown> {
    const id = ++this.seq;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, (r) => (r.ok ? resolve(r.value) : reject(new Error(r.error))));
      this.workers[i]?.proc.send({ ...req, id });
    });
  }

  async launch(refs: JobRef[]): Promise<Array<{ ref: JobRef; handle?: string; error?: StopClass }>> {
    // Each ref goes to the least-loaded worker.
    const batches = this.workers.map(() => [] as JobRef[]);
    for (const ref of refs) {
      let best = 0;
      for (let i = 1; i < this.workers.length; i++)
        if (this.workers[i]!.live + batches[i]!.length < this.workers[best]!.live + batches[best]!.length)
          best = i;
      batches[best]!.push(ref);
    }
    const out = await Promise.all(
      batches.map(async (b, i) => {
        if (b.length === 0) return [];
        const r = (await this.call(i, { op: "launch", refs: b })) as Array<{
          ref: JobRef;
          handle?: string;
          error?: StopClass;
        }>;
        this.workers[i]!.live += r.filter((x) => x.handle).length;
        return r.map((x) => (x.handle ? { ...x, handle: `w${i}/${x.handle}` } : x));
      }),
    );
    return out.flat();
  }

  private byWorker(handles: string[]): Map<number, string[]> {
    const m = new Map<number, string[]>();
    for (const h of handles) {
      const slash = h.indexOf("/");
      const i = Number(h.slice(1, slash));
      if (!Number.isInteger(i) || !this.workers[i]) continue;
      const list = m.get(i) ?? [];
      list.push(h.slice(slash + 1));
      m.set(i, list);
    }
    return m;
  }

  async observe(handles: string[]): Promise<TaskState[]> {
    const out: TaskState[] = [];
    await Promise.all(
      [...this.byWorker(handles)].map(async ([i, hs]) => {
        const states = (await this.call(i, { op: "observe", handles: hs })) as TaskState[];
        for (const s of states) {
          if (s.phase === "stopped") this.workers[i]!.live--;
          out.push({ ...s, handle: `w${i}/${s.handle}` });
        }
      }),
    );
    return out;
  }

  async stop(handles: string[], reason: string): Promise<void> {
    await Promise.all(
      [...this.byWorker(handles)].map(([i, hs]) => this.call(i, { op: "stop", handles: hs, reason })),
    );
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.workers.map((_, i) => this.call(i, { op: "close" })));
    for (const w of this.workers) w.proc.kill("SIGTERM");
  }
}

async function worker(): Promise<void> {
  const cfg = JSON.parse(loadBenchSettings("sim-worker").bench.options ?? "{}") as SimWorkerOptions;
  const { openPlane } = await import("../plane/connect.js");
  const { SimBackend } = await import("../actors/dispatcher/backends/sim.js");
  const plane = await openPlane({ nats: natsFromEnv(), name: `sim-worker-${process.argv.at(-1)}` });
  const sim = new SimBackend({
    plane,
    calls: cfg.calls,
    thinkMs: (ref) => thinkMsFor(ref.cellId, cfg.thinkS),
    mix: cfg.mix,
    usagePerCall: cfg.usagePerCall,
  });
  const send = (r: Reply) => process.send?.(r);
  process.on("message", (req: Request) => {
    const run = async (): Promise<unknown> => {
      switch (req.op) {
        case "launch":
          return await sim.launch(req.refs);
        case "observe":
          return await sim.observe(req.handles);
        case "stop":
          return await sim.stop(req.handles, req.reason);
        case "close":
          await sim.close();
          await plane.close();
          return null;
      }
    };
    run().then(
      (value) => send({ id: req.id, ok: true, value: value ?? null }),
      (err: unknown) => send({ id: req.id, ok: false, error: String(err) }),
    );
  });
  process.on("disconnect", () => process.exit(0));
  process.send?.("ready");
}

if (process.argv.includes("--sim-worker")) await worker();
