import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parse as parseYaml } from "yaml";
import { openPlane, type Plane } from "../../plane/connect.js";
import {
  hasReviewPhase,
  type RunConfigInput,
  RunConfigSchema,
  TaskSpecSchema,
} from "../../protocol/config.js";
import {
  type AttemptResult,
  AttemptResultSchema,
  type CellWork,
  MessageTypes,
} from "../../protocol/messages.js";
import { StateKeys, Subjects } from "../../protocol/subjects.js";
import { JobRefEnv } from "../../protocol/task.js";
import { Streams } from "../../protocol/topology.js";
import { wireModelId } from "../../providers/run-prices.js";
import {
  type ScriptedProvider,
  type ScriptedProviderOptions,
  startScriptedProvider,
} from "../../scripted-provider/index.js";
import { type RunTaskOptions, runTask } from "../../task/index.js";
import { startNats, type TestNats } from "../helpers/nats.js";

export const RUN_KEY = "sk-run-task-0123456789abcdef";
export const LIBRARY = resolve("examples/tasks");
export const FIXED_CALC = readFileSync(join(LIBRARY, "repos/calc/calc.js"), "utf8").replace(
  "a - b;\n}\n\nexport function sub",
  "a + b;\n}\n\nexport function sub",
);

/**
 * The calc fix in three writes at 200k input tokens a call: what the over-budget tests script, whatever the agent,
 * so that a low budget stops the attempt with part of the fix written.
 */
export const THREE_WRITE_FIX = {
  files: [
    { path: "calc.js", content: FIXED_CALC },
    { path: "NOTES.md", content: "two\n" },
    { path: "MORE.md", content: "three\n" },
  ],
  usage: { input: 200_000 },
};

/** NATS with the topology, a scripted provider that accepts only the run key, and temp work / mirror roots. */
export interface TaskRig {
  nats: TestNats;
  plane: Plane;
  provider: ScriptedProvider;
  workRoot: string;
  mirrorRoot: string;
  /** write the planner's three jobs entries (run config, task spec, cell) for one cell; returns the cell id */
  plan(
    run: Partial<RunConfigInput> & { name: string },
    task?: string | Record<string, unknown>,
    repeat?: number,
  ): Promise<string>;
  run(run: string, cell: string, attempt?: number, opts?: Partial<RunTaskOptions>): Promise<AttemptResult>;
  /** the AttemptResult as it landed on the stream */
  /** the result published for one attempt (default the first) */
  published(run: string, cell: string, attempt?: number): Promise<AttemptResult>;
  blob(name: string): Promise<string | null>;
  /** the attempt's patch: inline in its result when small, else its blob */
  patch(r: AttemptResult): Promise<string | null>;
  /**
   * The environment a launch backend gives `evalfleet task` for one attempt, against this rig (the provider as the
   * gateway, its work and mirror roots, log level warn); `extra` adds to it or overrides it.
   */
  cliEnv(run: string, cell: string, attempt: number, extra?: Record<string, string>): Record<string, string>;
  close(): Promise<void>;
}

export async function startTaskRig(providerOpts: ScriptedProviderOptions = {}): Promise<TaskRig> {
  const nats = await startNats();
  const plane = await openPlane({ nats: nats.settings, name: "task-test" });
  const provider = await startScriptedProvider({ keys: [RUN_KEY], ...providerOpts });
  const tmp = await mkdtemp(join(tmpdir(), "ef-task-test-"));
  const workRoot = join(tmp, "work");
  const mirrorRoot = join(tmp, "mirrors");
  const blob = async (name: string): Promise<string | null> => {
    const b = await plane.blobs.getBlob(name);
    return b === null ? null : Buffer.from(b).toString("utf8");
  };
  return {
    nats,
    plane,
    provider,
    workRoot,
    mirrorRoot,
    async plan(input, taskIn = "sample-calc-add.yaml", repeat = 0) {
      const config = RunConfigSchema.parse({
        harnesses: [{ name: "reference", adapter: "reference" }],
        models: [{ name: "gpt-5-mini", provider: "openai" }],
        tasks: ["*"],
        timeout_seconds: 60,
        ...input,
        task_library_path: LIBRARY,
      });
      const task = TaskSpecSchema.parse(
        typeof taskIn === "string" ? parseYaml(readFileSync(join(LIBRARY, taskIn), "utf8")) : taskIn,
      );
      const harness = config.harnesses[0]!;
      const model = config.models.find((m) => m.role === "implementation") ?? config.models[0]!;
      const reviewModel = hasReviewPhase(task)
        ? (config.models.find((m) => m.role === "review")?.name ?? null)
        : null;
      const cellId = `${harness.name}__${model.name}__${task.id}__r${repeat}`;
      const work: CellWork = {
        type: MessageTypes.cellWork,
        run: config.name,
        cellId,
        pool: wireModelId(model),
        harness: harness.name,
        model: model.name,
        reviewModel,
        taskId: task.id,
        track: task.track,
        repeat,
        traceId: cellId,
        exempt: false,
        costMode: model.cost_mode,
      };
      await plane.kv.jobs.put(StateKeys.jobRun(config.name), JSON.stringify(config));
      await plane.kv.jobs.put(StateKeys.jobTask(config.name, task.id), JSON.stringify(task));
      await plane.kv.jobs.put(StateKeys.job(config.name, cellId), JSON.stringify(work));
      return cellId;
    },
    cliEnv(run, cell, attempt, extra = {}) {
      return {
        PATH: process.env.PATH ?? "",
        HOME: process.env.HOME ?? "/tmp",
        ...nats.env,
        EVALFLEET_GATEWAY_URL: provider.url,
        EVALFLEET_WORKDIR: workRoot,
        EVALFLEET_GIT_MIRRORS: mirrorRoot,
        EVALFLEET_LOG_LEVEL: "warn",
        [JobRefEnv.run]: run,
        [JobRefEnv.cell]: cell,
        [JobRefEnv.attempt]: String(attempt),
        ...extra,
      };
    },
    run(run, cell, attempt = 1, opts = {}) {
      return runTask(
        { run, cell, attempt },
        {
          plane,
          upstream: provider.url,
          runKey: RUN_KEY,
          workRoot,
          mirrorRoot,
          env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp" },
          retry: { baseDelayMs: 5, maxDelayMs: 50 },
          graceMs: 500,
          ...opts,
        },
      );
    },
    async published(run, cell, attempt = 1) {
      const m = await plane.jsm.streams.getMessage(Streams.attempts.name, {
        last_by_subj: Subjects.attempts.one(run, cell, attempt),
      });
      if (!m) throw new Error("no attempt result on the stream");
      return AttemptResultSchema.parse(m.json());
    },
    blob,
    async patch(r) {
      if (r.patch !== null) return r.patch;
      return r.patchRef ? blob(r.patchRef) : null;
    },
    async close() {
      await provider.close();
      await plane.close();
      await nats.cleanup();
      await rm(tmp, { recursive: true, force: true });
    },
  };
}
