import { resolve } from "node:path";
import { type DispatcherOptions, startDispatcher } from "../../actors/dispatcher/actor.js";
import { SimBackend, type SimBackendOptions } from "../../actors/dispatcher/backends/sim.js";
import type { JobRef, LaunchBackend } from "../../actors/dispatcher/backends/types.js";
import type { BudgetState } from "../../actors/dispatcher/budget.js";
import { startPlanner } from "../../actors/planner/actor.js";
import { type ResultsWriterOptions, startResultsWriter } from "../../actors/results-writer/actor.js";
import type { Actor } from "../../actors/runtime/actor.js";
import { silentLogger } from "../../lib/log.js";
import type { Plane } from "../../plane/connect.js";
import { decodeJson } from "../../protocol/decode.js";
import {
  type AttemptResult,
  AttemptResultSchema,
  type RunEvent,
  RunEventSchema,
} from "../../protocol/messages.js";
import { StateKeys, Subjects } from "../../protocol/subjects.js";
import { Streams } from "../../protocol/topology.js";
import type { startNats } from "../helpers/nats.js";
import { type PlaneRig, type RigTask, startPlaneRig } from "../helpers/plane-rig.js";
import { waitFor } from "../helpers/wait.js";

export { waitFor };

/**
 * A run of the rig's stand-in harness `h` (the sim backend's adapter unless `adapter` says otherwise) and a priced model
 * `m` over `tasks`; the rest of the run config as given.
 */
export function rigRun(
  name: string,
  tasks: string[],
  { adapter = "sim", ...config }: Record<string, unknown> & { adapter?: string } = {},
): Record<string, unknown> {
  return {
    name,
    harnesses: [{ name: "h", adapter }],
    models: [{ name: "m", prices: { input_per_mtok: 1, output_per_mtok: 2 } }],
    tasks,
    ...config,
  };
}

/** A plane rig (NATS + a fresh DB + a task library) with a planner; dispatchers are added per test. */
export interface DispatchRig extends PlaneRig {
  client: Plane;
  launches: Array<JobRef & { at: number }>;
  dispatcher(opts?: {
    sim?: Partial<SimBackendOptions>;
    backend?: LaunchBackend;
    extra?: Partial<DispatcherOptions>;
  }): Promise<Actor>;
  /** The results-writer on a plane of its own, stopped with the rig. */
  resultsWriter(
    opts?: Omit<ResultsWriterOptions, "plane" | "db" | "log">,
  ): Promise<{ writer: Actor; plane: Plane }>;
  submit(config: Record<string, unknown>): Promise<void>;
}

export async function startRig(
  tasks: RigTask[],
  opts: { nats?: Parameters<typeof startNats>[0] } = {},
): Promise<DispatchRig> {
  const base = await startPlaneRig("dispatcher", { tasks, ...opts });
  const { store, libDir, plane } = base;
  const client = await plane("test-client");
  base.adopt(
    await startPlanner({
      plane: await plane("planner"),
      db: store.db,
      log: silentLogger(),
      // the rig's own tasks, and the shipped examples that tests with real tasks submit by path
      libraryRoots: [libDir, resolve("examples")],
    }),
  );
  const launches: Array<JobRef & { at: number }> = [];
  let dispatchers = 0;
  return {
    ...base,
    client,
    launches,
    async resultsWriter(opts = {}) {
      const p = await plane("results-writer");
      const writer = base.adopt(
        await startResultsWriter({ plane: p, db: store.db, log: silentLogger(), ...opts }),
      );
      return { writer, plane: p };
    },
    async dispatcher(opts = {}) {
      const p = await plane(`dispatcher-${++dispatchers}`);
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
        // every attempt's task gets a NATS user of its own, as `up` does it
        natsSigner: base.nats.signer,
        capacityPollMs: 50,
        observeMs: 100,
        exitGraceMs: 300,
        cleanExitGraceMs: 2_500,
        ...opts.extra,
      });
      return base.adopt(a);
    },
    async submit(config) {
      // The rig's tasks are stand-ins with nothing to grade: planned without gold validation.
      await client.js.publish(
        Subjects.runSubmit,
        JSON.stringify({ task_library_path: libDir, unvalidated: true, ...config }),
      );
    },
  };
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
  return readSubject(p, Streams.attempts.name, Subjects.attempts.run(run), (d) =>
    decodeJson(AttemptResultSchema, d, "attempt"),
  );
}

/**
 * Wait until `run` has exactly `results` attempt results and no open budget reservation (every cell final, its
 * money released); the results and the budget then.
 */
export async function waitForSettled(
  rig: DispatchRig,
  run: string,
  results: number,
  ms?: number,
): Promise<{ results: AttemptResult[]; budget: BudgetState }> {
  return await waitFor(
    `${run}: ${results} attempt results and no open reservation`,
    async () => {
      const r = await attemptResults(rig.client, run);
      const b = await budgetState(rig.client, run);
      return r.length === results && b && Object.keys(b.open).length === 0
        ? { results: r, budget: b }
        : undefined;
    },
    ms,
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
