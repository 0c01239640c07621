/**
 * The grader-supervisor: consumes grade jobs, fetches the patch (object store) and the task spec (jobs KV), grades
 * with the local backend (tasks shipped with evalfleet) or the docker backend (SWE-bench images), and publishes one
 * GradeResult per attempt. Environment failures that survive the retries are published as INFRA_FAILURE, never as
 * the model's NO.
 */
import path from "node:path";
import { type RunConfig, RunConfigSchema, type TaskSpec, TaskSpecSchema } from "../../protocol/config.js";
import { decodeJson, encodeJson } from "../../protocol/decode.js";
import { ErrorCode, EvalfleetError, formatIssues, ValidationError } from "../../protocol/errors.js";
import type { Logger } from "../../protocol/log.js";
import {
  type GradeJob,
  GradeJobSchema,
  type GradeResult,
  GradeResultSchema,
} from "../../protocol/messages.js";
import { redactSecrets, secretsFromEnv } from "../../protocol/redact.js";
import { BlobNames, StateKeys, Subjects } from "../../protocol/subjects.js";
import { Consumers } from "../../protocol/topology.js";
import type { Db } from "../../store/db.js";
import { Actor, type Delivery } from "../runtime/actor.js";
import type { Plane } from "../runtime/connect.js";
import { readJob } from "../runtime/jobs.js";
import { gradeCacheKey } from "./backends/cache.js";
import { createDockerBackend } from "./backends/docker.js";
import { createGrader, type RetryPolicy } from "./backends/grader.js";
import { createLocalBackend } from "./backends/local.js";
import type { GradeBackend, GradeOutcome } from "./backends/types.js";
import { withFreshCheckout } from "./checkout.js";
import { DbGradeCache, getTaskValidation } from "./records.js";
import {
  type BackendKind,
  gradeResultOf,
  infraResult,
  type PreparedJob,
  prepareTaskJob,
} from "./task-job.js";

export interface GraderSupervisorOptions {
  plane: Plane;
  db: Db;
  log: Logger;
  /** Replaces both raw backends (tests, a remote eval host); local grades still get a fresh checkout each. */
  backend?: GradeBackend;
  backends?: Partial<Record<BackendKind, GradeBackend>>;
  retry?: Partial<RetryPolicy>;
  /** Grades in parallel per replica. */
  concurrency?: number;
  /** Log format for local tasks that name none (default pytest-style). */
  localLogFormat?: string;
  localTimeoutS?: number;
  /** Where a relative task_library_path resolves. */
  baseDir?: string;
  dockerPath?: string;
  /** Environment of the graded processes. */
  env?: NodeJS.ProcessEnv;
}

/** The graded run must not believe it runs inside this process's test runner. */
function childEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const { NODE_TEST_CONTEXT: _inner, ...rest } = env;
  return rest;
}

export function buildGraders(
  opts: Omit<GraderSupervisorOptions, "plane" | "db"> & { log: Logger },
  cache: DbGradeCache | undefined,
): Record<BackendKind, GradeBackend> {
  const env = childEnv(opts.env ?? process.env);
  const local = opts.backends?.local ?? opts.backend ?? createLocalBackend({ env, logger: opts.log });
  const docker =
    opts.backends?.docker ??
    opts.backend ??
    createDockerBackend({ logger: opts.log, ...(opts.dockerPath ? { dockerPath: opts.dockerPath } : {}) });
  const common = {
    logger: opts.log,
    ...(opts.retry ? { retry: opts.retry } : {}),
    ...(cache ? { cache } : {}),
  };
  return {
    local: createGrader(withFreshCheckout(local, env), common),
    docker: createGrader(docker, common),
  };
}

export async function startGraderSupervisor(opts: GraderSupervisorOptions): Promise<Actor> {
  const actor = new Actor("grader-supervisor", opts.plane, opts.log);
  const cache = new DbGradeCache(opts.db);
  const graders = buildGraders(opts, cache);
  await actor.start();
  await actor.consume({
    def: Consumers.graderSupervisor,
    schema: GradeJobSchema,
    what: "grade job",
    concurrency: opts.concurrency ?? 2,
    handle: async (d) => {
      const result = await gradeOne(opts, graders, cache, d);
      await publishResult(opts.plane, result);
    },
    // A job that keeps failing for a reason nobody can fix still gets a row: INFRA_FAILURE, not silence.
    onPoison: async (raw, _subject, err) => {
      let job: GradeJob;
      try {
        job = decodeJson(GradeJobSchema, raw, "grade job");
      } catch {
        return;
      }
      await publishResult(opts.plane, infraResult(keyOf(job), `grading failed: ${err.message}`));
    },
  });
  return actor;
}

function keyOf(job: GradeJob): { run: string; cellId: string; attempt: number } {
  return { run: job.run, cellId: job.cellId, attempt: job.attempt };
}

export async function publishResult(plane: Plane, result: GradeResult): Promise<void> {
  const error = result.error === null ? null : redactSecrets(result.error, secretsFromEnv());
  await plane.js.publish(
    Subjects.gradeResults.one(result.run),
    encodeJson(GradeResultSchema, { ...result, error }, "grade result"),
    {
      msgID: `${result.run}/${result.cellId}/${result.attempt}/grade`,
    },
  );
}

/** Grade one job; returns the result to publish. Throws only for retryable trouble (the job is redelivered). */
export async function gradeOne(
  opts: GraderSupervisorOptions,
  graders: Record<BackendKind, GradeBackend>,
  cache: DbGradeCache | undefined,
  d: Delivery<GradeJob>,
): Promise<GradeResult> {
  const job = d.value;
  const key = keyOf(job);
  const log = opts.log.child({ run: job.run, cell: job.cellId, attempt: job.attempt, task: job.taskId });
  let task: TaskSpec | null;
  let config: RunConfig | null;
  try {
    task = await readJob(opts.plane, StateKeys.jobTask(job.run, job.taskId), TaskSpecSchema, "task spec");
    config = await readJob(opts.plane, StateKeys.jobRun(job.run), RunConfigSchema, "run config");
  } catch (err) {
    if (err instanceof ValidationError)
      return infraResult(key, `${err.message}\n${formatIssues(err.issues)}`);
    throw err;
  }
  if (!task) return infraResult(key, `task spec ${job.taskId} of run ${job.run} is not in the jobs bucket`);
  const patchBytes = await opts.plane.blobs.getBlob(job.patchRef);
  if (patchBytes === null) return infraResult(key, `patch blob ${job.patchRef} is missing`);
  const patch = new TextDecoder().decode(patchBytes);

  let prepared: PreparedJob;
  try {
    const libraryDir = path.resolve(opts.baseDir ?? process.cwd(), config?.task_library_path ?? ".");
    const validated = await getTaskValidation(opts.db, task.id);
    prepared = await prepareTaskJob(task, patch, {
      libraryDir,
      validatedDigest: validated?.imageDigest ?? null,
      ...(opts.localLogFormat ? { localLogFormat: opts.localLogFormat } : {}),
      ...(opts.localTimeoutS ? { localTimeoutS: opts.localTimeoutS } : {}),
    });
  } catch (err) {
    if (err instanceof ValidationError)
      return infraResult(key, `${err.message}\n${formatIssues(err.issues)}`);
    throw err;
  }

  const cacheKey = gradeCacheKey(prepared.imageDigest, patch);
  cache?.note(cacheKey, {
    instanceId: prepared.job.instance.instance_id,
    imageDigest: prepared.imageDigest,
    patch,
  });
  // Grading can outlast ack_wait (docker's default timeout is 30 min): keep telling the server we are alive.
  const alive = setInterval(() => d.working(), 30_000);
  let outcome: GradeOutcome;
  try {
    outcome = await graders[prepared.backend].grade(prepared.job, d.signal);
  } catch (err) {
    if (err instanceof ValidationError)
      return infraResult(key, `${err.message}\n${formatIssues(err.issues)}`);
    if (err instanceof EvalfleetError && err.retryable) throw err;
    throw new EvalfleetError(ErrorCode.Internal, `grading ${job.taskId} failed: ${(err as Error).message}`, {
      cause: err,
    });
  } finally {
    clearInterval(alive);
    cache?.forget(cacheKey);
  }
  log.info(
    { backend: prepared.backend, kind: outcome.kind, cached: "cached" in outcome && outcome.cached },
    "graded",
  );
  if (outcome.kind === "graded") await saveTestOutput(opts, job, outcome.testOutput, log);
  return gradeResultOf(key, prepared.job.instance.instance_id, outcome, prepared.imageDigest);
}

async function saveTestOutput(opts: GraderSupervisorOptions, job: GradeJob, output: string, log: Logger) {
  try {
    await opts.plane.blobs.putBlob(
      { name: BlobNames.attempt(job.run, job.cellId, job.attempt, "test_output.txt") },
      new TextEncoder().encode(output),
    );
  } catch (err) {
    // The verdict is what matters; a lost copy of the log is not worth failing the grade for.
    log.warn({ err }, "could not store test_output.txt");
  }
}
