/**
 * From a task spec and a patch to a backend grade job, and from a backend outcome to the GradeResult on the wire.
 * Pure apart from hashing a local task's folder; shared by the actor and `evalfleet validate-env`.
 */
import path from "node:path";
import { GRADER_VERSION, type GradingInstance, ResolvedStatus } from "../../grading/index.js";
import { officialImageName } from "../../images/mirror.js";
import type { TaskSpec } from "../../protocol/config.js";
import { ErrorCode, ValidationError } from "../../protocol/errors.js";
import { type GradeResult, MessageTypes } from "../../protocol/messages.js";
import type { GradeJob, GradeOutcome } from "./backends/types.js";
import { localTaskDigest } from "./checkout.js";

/** The parser a local task's output is read with unless the task names one (`log_format:`). */
export const DEFAULT_LOCAL_LOG_FORMAT = "pytest";

export type BackendKind = "local" | "docker";

export interface PreparedJob {
  backend: BackendKind;
  job: GradeJob;
  /** What the verdict was computed against: the image digest, or a local task's content digest. */
  imageDigest: string;
}

export interface PrepareOptions {
  /** Where a relative `repo_path` resolves: the task library folder. */
  libraryDir: string;
  /** Log format for local tasks that name none. */
  localLogFormat?: string;
  /** Seconds a local task's tests may run (the backend's default otherwise). */
  localTimeoutS?: number;
  /** The digest gold validation recorded, for a docker task whose image names none. */
  validatedDigest?: string | null;
  /**
   * The image to grade in, pinned by digest, when the task file names none pinned: the image gold validation graded
   * in (its record), or the one validation resolved (a built image of a folder task, the mirror of a SWE-bench one).
   * A folder task with one is graded in that container; without, in a checkout on this host.
   */
  image?: { name: string; digest: string } | null;
  emptyPatch?: "skip" | "run";
}

function instanceOf(task: TaskSpec): GradingInstance {
  const inst: GradingInstance = {
    instance_id: task.instance_id ?? task.id,
    repo: task.repo ?? `evalfleet/${task.id}`,
    version: task.version ?? null,
    FAIL_TO_PASS: task.FAIL_TO_PASS,
    PASS_TO_PASS: task.PASS_TO_PASS,
    test_patch: task.test_patch,
  };
  if (task.base_commit) inst.base_commit = task.base_commit;
  return inst;
}

/** True when the task runs in a local checkout (shipped with evalfleet) rather than an image. */
export function isLocalTask(task: TaskSpec): boolean {
  return task.repo_path !== undefined && task.test_command !== undefined;
}

function notGradable(task: TaskSpec, reason: string): ValidationError {
  return new ValidationError(ErrorCode.InvalidConfig, `task ${task.id} cannot be graded`, [
    { path: `task ${task.id}`, reason },
  ]);
}

/** `name@sha256:…` split, or null when the reference is not pinned by digest. */
export function pinnedImage(ref: string | undefined): { name: string; digest: string } | null {
  const m = ref === undefined ? null : /^(.+)@(sha256:[0-9a-f]{64})$/.exec(ref);
  return m ? { name: m[1] as string, digest: m[2] as string } : null;
}

export async function prepareTaskJob(
  task: TaskSpec,
  patch: string | null,
  opts: PrepareOptions,
): Promise<PreparedJob> {
  const instance = instanceOf(task);
  const mode = opts.emptyPatch === undefined ? {} : { emptyPatch: opts.emptyPatch };
  if (isLocalTask(task)) {
    const source = path.resolve(opts.libraryDir, task.repo_path as string);
    const logFormat =
      typeof task.log_format === "string"
        ? task.log_format
        : (opts.localLogFormat ?? DEFAULT_LOCAL_LOG_FORMAT);
    const testCmd = task.test_command as string;
    const pinned = pinnedImage(task.image) ?? opts.image ?? null;
    if (pinned) {
      // Built into an instance image by `evalfleet images build`: graded in a container, /testbed at the base
      // commit the image names.
      const job: GradeJob = { instance, patch, ...mode, testCmd, logFormat, image: pinned };
      if (opts.localTimeoutS !== undefined) job.timeoutS = opts.localTimeoutS;
      return { backend: "docker", job, imageDigest: pinned.digest };
    }
    const imageDigest = await localTaskDigest(source, {
      testCmd,
      logFormat,
      instance,
      graderVersion: GRADER_VERSION,
    }).catch((err: NodeJS.ErrnoException) => {
      throw notGradable(task, `repo_path ${source} cannot be read (${err.code ?? err.message})`);
    });
    const job: GradeJob = {
      instance,
      patch,
      ...mode,
      // The source folder: withFreshCheckout copies it and fills in base_commit.
      checkoutDir: source,
      testCmd,
      logFormat,
      image: { name: `local/${task.id}`, digest: imageDigest },
    };
    if (opts.localTimeoutS !== undefined) job.timeoutS = opts.localTimeoutS;
    return { backend: "local", job, imageDigest };
  }
  if (task.track === "open_ended") throw notGradable(task, "open_ended tasks are judged, not graded");
  if (!task.repo || !task.base_commit) {
    throw notGradable(task, "needs repo_path + test_command (local) or repo + base_commit (SWE-bench image)");
  }
  const own = pinnedImage(task.image);
  if (!own && opts.image) {
    return {
      backend: "docker",
      job: { instance, patch, ...mode, image: opts.image },
      imageDigest: opts.image.digest,
    };
  }
  const ref = task.image ?? officialImageName(instance.instance_id);
  const at = ref.indexOf("@");
  const name = at === -1 ? ref : ref.slice(0, at);
  const digest = at === -1 ? (opts.validatedDigest ?? undefined) : ref.slice(at + 1);
  if (!digest) {
    throw notGradable(
      task,
      `image ${name} is not pinned by digest; mirror it (\`evalfleet images mirror\`) and run \`evalfleet validate-env\`, which records the digest it graded in`,
    );
  }
  return {
    backend: "docker",
    job: { instance, patch, ...mode, image: { name, digest } },
    imageDigest: digest,
  };
}

const STATUS: Record<ResolvedStatus, GradeResult["status"]> = {
  [ResolvedStatus.FULL]: "FULL",
  [ResolvedStatus.PARTIAL]: "PARTIAL",
  [ResolvedStatus.NO]: "NO",
};

export interface ResultKey {
  run: string;
  cellId: string;
  attempt: number;
}

/** A backend outcome as the GradeResult the results-writer lands. Infrastructure failures are never NO. */
export function gradeResultOf(
  key: ResultKey,
  instanceId: string,
  outcome: GradeOutcome,
  imageDigest: string | null,
  grader?: BackendKind,
): GradeResult {
  const base = {
    type: MessageTypes.gradeResult,
    ...key,
    imageDigest,
    ...(grader ? { grader } : {}),
    graderVersion: GRADER_VERSION,
    gradedAt: new Date().toISOString(),
  } as const;
  if (outcome.kind === "graded") {
    return {
      ...base,
      status: STATUS[outcome.status],
      resolved: outcome.resolved,
      report: outcome.report,
      cached: outcome.cached ?? false,
      error: null,
    };
  }
  if (outcome.kind === "not_graded") {
    // The harness writes no report.json here; this is the entry it would have, so every row has one shape.
    const report = {
      [instanceId]: {
        patch_is_None: false,
        patch_exists: outcome.reason !== "empty_patch",
        patch_successfully_applied: false,
        resolved: false,
      },
    };
    return {
      ...base,
      status: "NO",
      resolved: false,
      report,
      cached: outcome.cached ?? false,
      error: `${outcome.reason}: ${outcome.detail.slice(-4000)}`,
    };
  }
  return {
    ...infraResult(
      key,
      `${outcome.failure.kind} after ${outcome.attempts} attempt(s): ${outcome.failure.message}`,
      imageDigest,
    ),
    ...(grader ? { grader } : {}),
  };
}

/** INFRA_FAILURE: the attempt is not scored (not the model's failure). */
/** A grade the grader refused to run (a forged patch reference): not resolved, the attempt's own doing. */
export function refusedResult(key: ResultKey, error: string): GradeResult {
  return { ...infraResult(key, error), status: "NO" };
}

export function infraResult(key: ResultKey, error: string, imageDigest: string | null = null): GradeResult {
  return {
    type: MessageTypes.gradeResult,
    ...key,
    status: "INFRA_FAILURE",
    resolved: false,
    report: {},
    imageDigest,
    graderVersion: GRADER_VERSION,
    cached: false,
    error,
    gradedAt: new Date().toISOString(),
  };
}
