/**
 * Grading in the task's instance image, as run_evaluation.run_instance does: a fresh container per grade from the
 * image pinned by digest, the patch-apply fallback chain, /eval.sh under the timeout (1,800 s by default), then the
 * container and its anonymous volumes removed whatever happened. Unlike the official harness the container has no
 * network, memory / CPU / pids limits, and runs as the image's grading user when it names one (images evalfleet
 * builds do; the official images are graded as root, as upstream does). Environment failures (pull, start, disk,
 * timeout, a daemon error) come back as infrastructure failures for the grader to retry, never as the model's.
 */
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import {
  type Container,
  ContainerError,
  type ContainerRuntime,
  type ExecResult,
  type Limits,
  type RegistryAuth,
} from "../../../containers/index.js";
import {
  APPLY_PATCH_COMMANDS,
  DEFAULT_TIMEOUT_S,
  DOCKER_EVAL_SCRIPT,
  DOCKER_PATCH,
  DOCKER_USER,
  DOCKER_WORKDIR,
  makeEvalScript,
  makeLocalEvalScript,
} from "../../../grading/index.js";
import { GRADE_USER_LABEL } from "../../../images/base.js";
import { ImageLabels } from "../../../images/build.js";
import type { Logger } from "../../../lib/log.js";
import { silentLogger } from "../../../lib/log.js";
import { ErrorCode, EvalfleetError, ValidationError } from "../../../protocol/errors.js";
import { safeSlug } from "../../../protocol/names.js";
import { isEmptyPatch, outcomeFromLog, skipEmptyPatch } from "./common.js";
import type { GradeBackend, GradeJob, GradeOutcome, InfraFailureKind } from "./types.js";
import { infraFailure } from "./types.js";

/** Labels on every grade container: a restarted supervisor finds its dead predecessor's containers by them. */
export const GradeLabels = {
  role: "io.evalfleet.role",
  host: "io.evalfleet.grader-host",
  pid: "io.evalfleet.grader-pid",
  instance: "io.evalfleet.instance",
} as const;

/** Limits of a grade container unless configured: enough for the official images' test suites. */
export const DEFAULT_GRADE_LIMITS: Required<Limits> = {
  memoryBytes: 8 * 2 ** 30,
  cpus: 2,
  pids: 4096,
};

export interface DockerBackendOptions {
  /** The runtime, or how to connect to it (lazily: a supervisor starts even while no daemon answers). */
  runtime: ContainerRuntime | (() => Promise<ContainerRuntime>);
  defaultTimeoutS?: number;
  platform?: string;
  logger?: Logger;
  limits?: Limits;
  /** Seconds allowed for each housekeeping step (apply commands, copies); pulls have their own. */
  commandTimeoutS?: number;
  pullTimeoutS?: number;
  /** Credentials for the registry the images are pulled from. */
  pullAuth?: RegistryAuth;
}

const DIGEST = /^sha256:[0-9a-f]{64}$/;

/** An environment failure inside a step: unwinds to the outcome without scoring the model. */
class Infra extends Error {
  constructor(
    readonly kind: InfraFailureKind,
    message: string,
  ) {
    super(message);
  }
}

/** A fresh container name per grade: docker's alphabet, bounded, whatever the instance id holds. */
export function gradeContainerName(instanceId: string): string {
  return `evalfleet-grade-${safeSlug(instanceId.toLowerCase(), 80)}-${randomBytes(4).toString("hex")}`;
}

function aborted(): never {
  throw new EvalfleetError(ErrorCode.Unavailable, "grading aborted", { retryable: true });
}

/** What a runtime failure during `step` means for the grade. */
function infraOf(err: ContainerError, step: InfraFailureKind): Infra {
  if (err.failure === "out_of_disk") return new Infra("out_of_disk", err.message);
  if (err.failure === "timeout") return new Infra("timeout", err.message);
  return new Infra(step, err.message);
}

async function step<T>(kind: InfraFailureKind, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof ContainerError) throw infraOf(err, kind);
    throw err;
  }
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Remove grade containers a dead grader on this host left (it crashed between create and remove). Containers of
 * live graders, and of other hosts sharing the daemon, are left alone.
 */
export async function sweepGradeContainers(rt: ContainerRuntime, log: Logger): Promise<string[]> {
  const mine = await rt.list({ [GradeLabels.role]: "grade", [GradeLabels.host]: hostname() });
  const dead = mine.filter((c) => {
    const pid = Number(c.labels[GradeLabels.pid]);
    return !(Number.isInteger(pid) && pid > 0 && pid !== process.pid && pidAlive(pid)) && pid !== process.pid;
  });
  await Promise.all(dead.map((c) => rt.container(c.id).remove()));
  if (dead.length)
    log.warn({ containers: dead.map((c) => c.name) }, "removed grade containers a dead grader left");
  return dead.map((c) => c.name);
}

/** The daemon refuses a CPU limit above its host's CPUs; a memory limit above its RAM only misleads. */
export function clampLimits(limits: Required<Limits>, rt: Pick<ContainerRuntime, "info">): Required<Limits> {
  return {
    ...limits,
    cpus: Math.min(limits.cpus, Math.max(0.01, rt.info.cpus)),
    memoryBytes:
      rt.info.memoryBytes > 0 ? Math.min(limits.memoryBytes, rt.info.memoryBytes) : limits.memoryBytes,
  };
}

export function createDockerBackend(opts: DockerBackendOptions): GradeBackend {
  const log = opts.logger ?? silentLogger();
  const cmdTimeoutMs = (opts.commandTimeoutS ?? 300) * 1000;
  const pullTimeoutMs = (opts.pullTimeoutS ?? 1800) * 1000;
  const configured = { ...DEFAULT_GRADE_LIMITS, ...opts.limits };
  let connected: Promise<ContainerRuntime> | undefined;

  async function runtime(): Promise<ContainerRuntime> {
    if (typeof opts.runtime !== "function") return opts.runtime;
    connected ??= (async () => {
      const rt = await (opts.runtime as () => Promise<ContainerRuntime>)();
      await sweepGradeContainers(rt, log).catch((err) =>
        log.warn({ err }, "could not sweep old grade containers"),
      );
      return rt;
    })();
    try {
      return await connected;
    } catch (err) {
      connected = undefined; // try again on the next grade: the daemon may come back
      throw err;
    }
  }

  async function grade(job: GradeJob, signal: AbortSignal): Promise<GradeOutcome> {
    const skipped = skipEmptyPatch(job);
    if (skipped) return skipped;
    const image = job.image;
    if (!image || !DIGEST.test(image.digest)) {
      throw new ValidationError(ErrorCode.InvalidMessage, "docker grading needs an image pinned by digest", [
        { path: "image.digest", reason: "expected sha256:<64 hex>, as recorded by `evalfleet validate-env`" },
      ]);
    }
    let ref = `${image.name}@${image.digest}`;
    // Checked before any container exists: an instance without version/test_patch fails fast, not mid-run.
    const evalScriptFor = (baseCommit: string | undefined): string => {
      const instance = baseCommit ? { ...job.instance, base_commit: baseCommit } : job.instance;
      return job.testCmd === undefined
        ? makeEvalScript(instance)
        : makeLocalEvalScript(instance, { repoDir: DOCKER_WORKDIR, testCmd: job.testCmd });
    };
    evalScriptFor(job.instance.base_commit ?? "0".repeat(40));
    const timeoutS = job.timeoutS ?? opts.defaultTimeoutS ?? DEFAULT_TIMEOUT_S;
    const name = gradeContainerName(job.instance.instance_id);
    const child = log.child({ instance: job.instance.instance_id, container: name });
    let container: Container | undefined;
    try {
      const rt = await step("runtime", runtime);
      const limits = clampLimits(configured, rt);
      // Eval hosts are often pre-seeded with the images; only go to the registry when it is missing.
      let info = await step("image_pull", () => rt.inspectImage(ref));
      if (!info) {
        // An image built without a registry is pinned by its id, which is a digest of its content too.
        const byId = await step("image_pull", () => rt.inspectImage(image.digest));
        if (byId?.id === image.digest) {
          ref = image.digest;
          info = byId;
        }
      }
      if (!info) {
        const pullSignal = AbortSignal.any([signal, AbortSignal.timeout(pullTimeoutMs)]);
        await step("image_pull", () =>
          rt.pull(ref, { signal: pullSignal, ...(opts.pullAuth ? { auth: opts.pullAuth } : {}) }),
        );
        info = await step("image_pull", () => rt.inspectImage(ref));
        if (!info) throw new Infra("image_pull", `pulled ${ref} but the daemon does not have it`);
      }
      if (signal.aborted) aborted();
      const user = info.labels[GRADE_USER_LABEL] ?? DOCKER_USER;
      // Images evalfleet builds name the commit /testbed holds; the task's own base_commit wins when it has one.
      const evalScript = evalScriptFor(job.instance.base_commit ?? info.labels[ImageLabels.baseCommit]);
      const nonRoot = user !== DOCKER_USER && !user.startsWith("0");
      container = await step("container_start", () =>
        rt.create({
          image: ref,
          name,
          command: ["tail", "-f", "/dev/null"],
          user,
          workdir: DOCKER_WORKDIR,
          network: "none",
          limits,
          init: true,
          noNewPrivileges: true,
          ...(nonRoot ? { capDrop: ["ALL"] } : {}),
          ...(opts.platform ? { platform: opts.platform } : {}),
          labels: {
            [GradeLabels.role]: "grade",
            [GradeLabels.host]: hostname(),
            [GradeLabels.pid]: String(process.pid),
            [GradeLabels.instance]: job.instance.instance_id.slice(0, 200),
          },
        }),
      );
      const c = container;
      await step("container_start", () => c.start());
      const [uid, gid] = user.split(":").map(Number);
      const owner = nonRoot ? { uid: uid ?? 0, gid: gid ?? uid ?? 0 } : {};

      if (!isEmptyPatch(job.patch)) {
        await step("runtime", () =>
          c.putFiles("/", [{ name: DOCKER_PATCH.slice(1), content: job.patch ?? "", ...owner }]),
        );
        const applied = await applyPatch(c, user, signal);
        if (!applied.ok) {
          child.info({ output: applied.output }, "patch apply failed");
          return {
            kind: "not_graded",
            resolved: false,
            reason: "patch_apply_failed",
            detail: applied.output,
          };
        }
      }

      await step("runtime", () =>
        c.putFiles("/", [{ name: DOCKER_EVAL_SCRIPT.slice(1), content: evalScript, mode: 0o755, ...owner }]),
      );
      const r = await step("runtime", () =>
        c.exec(["/bin/bash", DOCKER_EVAL_SCRIPT], { user, signal, timeoutMs: timeoutS * 1000 }),
      );
      if (r.aborted) aborted();
      if (r.timedOut) throw new Infra("timeout", `tests exceeded ${timeoutS} s`);
      if (((await c.oomKills()) ?? 0) > 0)
        throw new Infra("runtime", `the grade container hit its memory limit (${limits.memoryBytes} bytes)`);
      return outcomeFromLog(job, r.combined, r.truncated ? "output truncated" : "");
    } catch (err) {
      if (err instanceof Infra) {
        child.warn({ kind: err.kind, err: err.message }, "infrastructure failure while grading");
        return infraFailure(err.kind, err.message);
      }
      throw err;
    } finally {
      // Always, whatever happened above: the container and its anonymous volumes go.
      if (container) {
        await container.remove().catch((err) => child.warn({ err }, "container removal failed"));
      }
    }
  }

  /** GIT_APPLY_CMDS in order, each on DOCKER_PATCH in /testbed; the first exit 0 wins. */
  async function applyPatch(
    c: Container,
    user: string,
    signal: AbortSignal,
  ): Promise<{ ok: boolean; output: string }> {
    let output = "";
    for (const cmd of APPLY_PATCH_COMMANDS) {
      const r: ExecResult = await step("runtime", () =>
        c.exec([...cmd, DOCKER_PATCH], { workdir: DOCKER_WORKDIR, user, signal, timeoutMs: cmdTimeoutMs }),
      );
      if (r.aborted) aborted();
      if (r.timedOut) throw new Infra("timeout", `${cmd.join(" ")} timed out`);
      if (r.exitCode === 0) return { ok: true, output: r.combined };
      output = r.combined;
    }
    return { ok: false, output };
  }

  return { name: "docker", grade };
}
