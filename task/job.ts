import type { KV } from "@nats-io/kv";
import {
  type HarnessSpec,
  type ModelSpec,
  type RunConfig,
  RunConfigSchema,
  type TaskSpec,
  TaskSpecSchema,
} from "../protocol/config.js";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import { type CellWork, CellWorkSchema } from "../protocol/messages.js";
import { StateKeys } from "../protocol/subjects.js";
import type { TaskRef } from "./ref.js";

/** One attempt's job, as the planner left it in the `jobs` bucket. */
export interface TaskJob {
  work: CellWork;
  config: RunConfig;
  task: TaskSpec;
  harness: HarnessSpec;
  model: ModelSpec;
}

async function getJson(jobs: KV, key: string, what: string): Promise<unknown> {
  const e = await jobs.get(key);
  if (e?.operation !== "PUT" || e.length === 0)
    throw new EvalfleetError(ErrorCode.NotFound, `${what} is not in the jobs bucket (key ${key})`);
  try {
    return e.json();
  } catch {
    throw new EvalfleetError(ErrorCode.InvalidMessage, `${what} (key ${key}) is not JSON`);
  }
}

function parsed<T>(
  schema: {
    safeParse(v: unknown): { success: true; data: T } | { success: false; error: { message: string } };
  },
  v: unknown,
  what: string,
): T {
  const r = schema.safeParse(v);
  if (!r.success)
    throw new EvalfleetError(ErrorCode.InvalidMessage, `${what} is invalid: ${r.error.message}`);
  return r.data;
}

/** Cell → run config → task spec, each validated, plus the cell's harness and model from the run config. */
export async function fetchJob(jobs: KV, ref: TaskRef): Promise<TaskJob> {
  const work = parsed(
    CellWorkSchema,
    await getJson(jobs, StateKeys.job(ref.run, ref.cell), "the cell"),
    "the cell",
  );
  const config = parsed(
    RunConfigSchema,
    await getJson(jobs, StateKeys.jobRun(ref.run), "the run"),
    "the run config",
  );
  const task = parsed(
    TaskSpecSchema,
    await getJson(jobs, StateKeys.jobTask(ref.run, work.taskId), `task ${work.taskId}`),
    `task ${work.taskId}`,
  );
  const harness = config.harnesses.find((h) => h.name === work.harness);
  const model = config.models.find((m) => m.name === work.model);
  if (!harness || !model)
    throw new EvalfleetError(
      ErrorCode.InvalidMessage,
      `cell ${ref.cell} names ${harness ? "" : `harness ${work.harness} `}${model ? "" : `model ${work.model} `}that run ${ref.run} does not list`,
    );
  return { work, config, task, harness, model };
}

/** The attempt's own gateway key the dispatcher minted at launch (plaintext), or null when there is none. */
export async function fetchAttemptKey(
  jobs: KV,
  run: string,
  cell: string,
  attempt: number,
): Promise<string | null> {
  const e = await jobs.get(StateKeys.attemptKey(run, cell, attempt));
  if (e?.operation !== "PUT" || e.length === 0) return null;
  return e.string();
}
