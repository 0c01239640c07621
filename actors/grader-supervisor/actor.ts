/**
 * The grader-supervisor: consumes grade jobs, fetches the patch (object store) and the task spec (jobs KV), grades
 * with the local backend (tasks shipped with evalfleet) or the docker backend (SWE-bench images), and publishes one
 * GradeResult per attempt. Environment failures that survive the retries are published as INFRA_FAILURE, never as
 * the model's NO.
 */
import path from "node:path";
import { ContainerRuntime, type Limits } from "../../containers/index.js";
import { parsePinned } from "../../images/resolve.js";
import type { Logger } from "../../lib/log.js";
import { Metrics } from "../../lib/metrics.js";
import type { Plane } from "../../plane/connect.js";
import {
  type RunConfig,
  RunConfigSchema,
  type TaskSpec,
  TaskSpecSchema,
  taskSpecHash,
} from "../../protocol/config.js";
import { decodeJson, encodeJson } from "../../protocol/decode.js";
import { ErrorCode, EvalfleetError, formatIssues, ValidationError } from "../../protocol/errors.js";
import { MsgIds } from "../../protocol/ids.js";
import {
  type GradeJob,
  GradeJobSchema,
  type GradeResult,
  GradeResultSchema,
} from "../../protocol/messages.js";
import { ownSecrets, redactSecrets } from "../../protocol/redact.js";
import { BlobNames, StateKeys, Subjects } from "../../protocol/subjects.js";
import { Consumers } from "../../protocol/topology.js";
import type { Db } from "../../store/db.js";
import { getTaskValidation } from "../../store/grades.js";
import { Actor, type Delivery } from "../runtime/actor.js";
import { readJob } from "../runtime/jobs.js";
import { foreignBlobRef, reportRefusals } from "../runtime/security.js";
import { gradeCacheKey } from "./backends/cache.js";
import { createDockerBackend } from "./backends/docker.js";
import { createGrader, type RetryPolicy } from "./backends/grader.js";
import { createLocalBackend } from "./backends/local.js";
import type { GradeBackend, GradeOutcome } from "./backends/types.js";
import { withFreshCheckout } from "./checkout.js";
import { type EvalTierOptions, runEvalTierScaler } from "./eval-tier.js";
import { DbGradeCache } from "./records.js";
import {
  type BackendKind,
  gradeResultOf,
  infraResult,
  type PreparedJob,
  prepareTaskJob,
  refusedResult,
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
  /** The container runtime docker grades run in (default: connect where DOCKER_HOST or the default socket says). */
  containers?: ContainerRuntime | (() => Promise<ContainerRuntime>);
  /** Limits of each grade container (defaults: DEFAULT_GRADE_LIMITS, clamped to the daemon's host). */
  gradeLimits?: Limits;
  /**
   * The environment graded processes start from (this process's, from its settings; secrets are removed), and
   * where the container runtime is found (DOCKER_HOST, else the default socket).
   */
  env: Readonly<Record<string, string | undefined>>;
  /**
   * Take grade jobs (default true). False for a replica with no container runtime in a deployment whose eval
   * workers grade (env.ts): it would only turn every SWE-bench job into an INFRA_FAILURE.
   */
  gradeJobs?: boolean;
  /** Size the eval tier's Auto Scaling group to the grade queue from this replica (eval-tier.ts). */
  evalTier?: EvalTierOptions;
}

/** The graded run must not believe it runs inside this process's test runner. */
function childEnv(env: Readonly<Record<string, string | undefined>>): NodeJS.ProcessEnv {
  const { NODE_TEST_CONTEXT: _inner, ...rest } = env;
  return rest;
}

export function buildGraders(
  opts: Omit<GraderSupervisorOptions, "plane" | "db"> & { log: Logger },
  cache: DbGradeCache | undefined,
): Record<BackendKind, GradeBackend> {
  const env = childEnv(opts.env);
  const local = opts.backends?.local ?? opts.backend ?? createLocalBackend({ env, logger: opts.log });
  const docker =
    opts.backends?.docker ??
    opts.backend ??
    createDockerBackend({
      logger: opts.log,
      runtime: opts.containers ?? (() => ContainerRuntime.connect({ env, logger: opts.log })),
      ...(opts.gradeLimits ? { limits: opts.gradeLimits } : {}),
    });
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
  if (opts.evalTier)
    runEvalTierScaler(actor, opts.plane, opts.evalTier, opts.log.child({ part: "eval-tier" }));
  if (opts.gradeJobs === false) {
    opts.log.info("not taking grade jobs here: the eval workers grade (EVALFLEET_GRADE_JOBS=none)");
    return actor;
  }
  await actor.consume({
    def: Consumers.graderSupervisor,
    schema: GradeJobSchema,
    what: "grade job",
    concurrency: opts.concurrency ?? 2,
    handle: async (d) => {
      const result = await gradeOne(opts, graders, cache, d, actor);
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
  const error = result.error === null ? null : redactSecrets(result.error, ownSecrets());
  await plane.js.publish(
    Subjects.gradeResults.one(result.run),
    encodeJson(GradeResultSchema, { ...result, error }, "grade result"),
    {
      msgID: MsgIds.grade(result.run, result.cellId, result.attempt),
    },
  );
  Metrics.grades.inc({ status: result.status });
}

/** Grade one job; returns the result to publish. Throws only for retryable trouble (the job is redelivered). */
export async function gradeOne(
  opts: GraderSupervisorOptions,
  graders: Record<BackendKind, GradeBackend>,
  cache: DbGradeCache | undefined,
  d: Delivery<GradeJob>,
  actor: Actor,
): Promise<GradeResult> {
  const job = d.value;
  const key = keyOf(job);
  const log = opts.log.child({ run: job.run, cell: job.cellId, attempt: job.attempt, task: job.taskId });
  // A job naming another attempt's patch (another run's resolved one) is never graded: the attempt did not write it.
  if (job.patch === null && foreignBlobRef(job, [job.patchRef]) !== null) {
    const message = `grader refused patch ${JSON.stringify(job.patchRef)} for ${job.cellId} attempt ${job.attempt}: not one of the attempt's own blobs`;
    await reportRefusals({ db: opts.db, actor, log }, [
      { ...key, check: "foreign_blob_ref", ref: job.patchRef, message },
    ]);
    return refusedResult(key, message);
  }
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
  // A small patch travels inline in the job; a bigger one is the attempt's blob.
  let patch = job.patch;
  if (patch === null) {
    const patchBytes = await opts.plane.blobs.getBlob(job.patchRef);
    if (patchBytes === null) return infraResult(key, `patch blob ${job.patchRef} is missing`);
    patch = new TextDecoder().decode(patchBytes);
  }

  let prepared: PreparedJob;
  try {
    const libraryDir = path.resolve(opts.baseDir ?? process.cwd(), config?.task_library_path ?? ".");
    const validated = await getTaskValidation(opts.db, task.id);
    // The image gold validation graded this very task in (not an earlier version of it): grade there too.
    const sameTask = validated?.valid === true && validated.taskHash === taskSpecHash(task);
    prepared = await prepareTaskJob(task, patch, {
      libraryDir,
      validatedDigest: validated?.imageDigest ?? null,
      image: sameTask ? parsePinned(validated?.imageRef) : null,
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
    {
      backend: prepared.backend,
      image: prepared.backend === "docker" ? prepared.job.image : undefined,
      kind: outcome.kind,
      cached: "cached" in outcome && outcome.cached,
    },
    "graded",
  );
  if (outcome.kind === "graded") await saveTestOutput(opts, job, outcome.testOutput, log);
  return gradeResultOf(
    key,
    prepared.job.instance.instance_id,
    outcome,
    prepared.imageDigest,
    prepared.backend,
  );
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
