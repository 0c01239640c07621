import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type DispatcherOptions, startDispatcher } from "../../actors/dispatcher/actor.js";
import { SimBackend, type SimBackendOptions } from "../../actors/dispatcher/backends/sim.js";
import type { JobRef, LaunchBackend } from "../../actors/dispatcher/backends/types.js";
import type { BudgetState } from "../../actors/dispatcher/budget.js";
import { startPlanner } from "../../actors/planner/actor.js";
import type { Actor } from "../../actors/runtime/actor.js";
import { openPlane, type Plane } from "../../actors/runtime/connect.js";
import { decodeJson } from "../../protocol/decode.js";
import { silentLogger } from "../../protocol/log.js";
import {
  type AttemptResult,
  AttemptResultSchema,
  type RunEvent,
  RunEventSchema,
} from "../../protocol/messages.js";
import { StateKeys, Subjects } from "../../protocol/subjects.js";
import { Streams } from "../../protocol/topology.js";
import { type FreshDb, freshDb } from "../helpers/db.js";
import { startNats, type TestNats } from "../helpers/nats.js";

/** NATS + a fresh DB + a planner + a task library; dispatchers are added per test. */
export interface DispatchRig {
  nats: TestNats;
  store: FreshDb;
  client: Plane;
  libDir: string;
  launches: Array<JobRef & { at: number }>;
  dispatcher(opts?: {
    sim?: Partial<SimBackendOptions>;
    backend?: LaunchBackend;
    extra?: Partial<DispatcherOptions>;
  }): Promise<Actor>;
  submit(config: Record<string, unknown>): Promise<void>;
  close(): Promise<void>;
}

export async function startRig(tasks: Array<{ id: string; track?: string }>): Promise<DispatchRig> {
  const nats = await startNats();
  const store = await freshDb("dispatcher");
  const libDir = await mkdtemp(join(tmpdir(), "ef-disp-lib-"));
  for (const t of tasks) {
    const track = t.track ?? "swe";
    const extra = track === "open_ended" ? "rubric: be good\n" : "";
    await writeFile(join(libDir, `${t.id}.yaml`), `id: ${t.id}\ntrack: ${track}\n${extra}`);
  }
  const planes: Plane[] = [];
  const actors: Actor[] = [];
  const plane = async (name: string) => {
    const p = await openPlane({ servers: nats.url, name });
    planes.push(p);
    return p;
  };
  const client = await plane("test-client");
  actors.push(await startPlanner({ plane: await plane("planner"), db: store.db, log: silentLogger() }));
  const launches: Array<JobRef & { at: number }> = [];
  return {
    nats,
    store,
    client,
    libDir,
    launches,
    async dispatcher(opts = {}) {
      const p = await plane(`dispatcher-${actors.length}`);
      const backend =
        opts.backend ??
        new SimBackend({
          plane: p,
          calls: 0,
          thinkMs: 100,
          ...opts.sim,
          outcome: (ref) => {
            launches.push({ ...ref, at: Date.now() });
            return opts.sim?.outcome?.(ref) ?? "PATCH_READY";
          },
        });
      const a = await startDispatcher({
        plane: p,
        db: store.db,
        log: silentLogger(),
        backend,
        capacityPollMs: 50,
        observeMs: 100,
        exitGraceMs: 300,
        cleanExitGraceMs: 2_500,
        ...opts.extra,
      });
      actors.push(a);
      return a;
    },
    async submit(config) {
      await client.js.publish(Subjects.runSubmit, JSON.stringify({ task_library_path: libDir, ...config }));
    },
    async close() {
      for (const a of actors.reverse()) await a.stop();
      for (const p of planes) await p.close();
      await store.cleanup();
      await nats.cleanup();
      await rm(libDir, { recursive: true, force: true });
    },
  };
}

export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined | false>,
  ms = 30_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function budgetState(p: Plane, run: string): Promise<BudgetState | null> {
  const e = await p.kv.budgets.get(StateKeys.budget(run));
  return e && e.length > 0 ? e.json<BudgetState>() : null;
}

export async function cellStatuses(
  rig: DispatchRig,
  run: string,
): Promise<Map<string, { status: string; error: string | null }>> {
  const r = await rig.store.db.query<{ cell_id: string; status: string; error: string | null }>(
    "SELECT cell_id, status, error FROM run_state WHERE run_name = $1",
    [run],
  );
  return new Map(r.rows.map((x) => [x.cell_id, { status: x.status, error: x.error }]));
}

/** Every message on a stream subject, read with an ephemeral ordered consumer. */
async function readSubject<T>(
  p: Plane,
  stream: string,
  subject: string,
  decode: (d: Uint8Array) => T,
): Promise<T[]> {
  const info = await p.jsm.streams.info(stream, { subjects_filter: subject });
  const n = Object.values(info.state.subjects ?? {}).reduce((a, b) => a + b, 0);
  if (n === 0) return [];
  const c = await p.js.consumers.get(stream, { filter_subjects: subject });
  const out: T[] = [];
  while (out.length < n) {
    const batch = await c.fetch({ max_messages: n - out.length, expires: 1_000 });
    let got = 0;
    for await (const m of batch) {
      out.push(decode(m.data));
      got++;
    }
    if (got === 0) break;
  }
  return out;
}

export function attemptResults(p: Plane, run: string): Promise<AttemptResult[]> {
  return readSubject(
    p,
    Streams.attempts.name,
    Subjects.attempts.one(run, "x").replace(/\.[^.]*$/, ".*"),
    (d) => decodeJson(AttemptResultSchema, d, "attempt"),
  );
}

export function runEvents(p: Plane, run: string): Promise<RunEvent[]> {
  return readSubject(p, Streams.events.name, Subjects.events.run(run), (d) =>
    decodeJson(RunEventSchema, d, "event"),
  );
}

/** What the results-writer would do for finished cells: mark them completed so a resume skips them. */
export async function markCompleted(rig: DispatchRig, run: string, cells: Iterable<string>): Promise<void> {
  const { setCellStatus } = await import("../../store/results.js");
  for (const c of cells) await setCellStatus(rig.store.db, run, c, "completed");
}
