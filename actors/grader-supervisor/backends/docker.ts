/**
 * Grading in the official per-instance image, as run_evaluation.run_instance does: a fresh container per
 * grade, the patch-apply fallback chain, /eval.sh under a timeout, then the container and its volumes
 * removed whatever happened. Driven through the docker CLI at an injectable path.
 */
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { ErrorCode, EvalfleetError, ValidationError } from "../../../protocol/errors.js";
import type { Logger } from "../../../protocol/log.js";
import { silentLogger } from "../../../protocol/log.js";
import { safeSlug } from "../../../protocol/names.js";
import {
  APPLY_PATCH_COMMANDS,
  DEFAULT_TIMEOUT_S,
  DOCKER_EVAL_SCRIPT,
  DOCKER_PATCH,
  DOCKER_USER,
  DOCKER_WORKDIR,
  makeEvalScript,
} from "../grading/index.js";
import { isEmptyPatch, outcomeFromLog, skipEmptyPatch } from "./common.js";
import { type RunResult, run } from "./exec.js";
import type { GradeBackend, GradeJob, GradeOutcome, InfraFailureKind } from "./types.js";
import { infraFailure, mentionsOutOfDisk } from "./types.js";

export interface DockerBackendOptions {
  /** The docker executable; tests point this at a fake. */
  dockerPath?: string;
  defaultTimeoutS?: number;
  platform?: string;
  logger?: Logger;
  /** Seconds allowed for each docker housekeeping call (pull excepted). */
  commandTimeoutS?: number;
  pullTimeoutS?: number;
  /** Environment of the docker CLI (DOCKER_HOST, DOCKER_CONFIG…); defaults to this process's. */
  env?: NodeJS.ProcessEnv;
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

export function createDockerBackend(opts: DockerBackendOptions = {}): GradeBackend {
  const docker = opts.dockerPath ?? "docker";
  const log = opts.logger ?? silentLogger();
  const platform = opts.platform ?? "linux/x86_64";
  const cmdTimeoutMs = (opts.commandTimeoutS ?? 300) * 1000;
  const pullTimeoutMs = (opts.pullTimeoutS ?? 1800) * 1000;
  const env = opts.env ?? process.env;

  async function dockerStep(
    args: string[],
    kind: InfraFailureKind,
    signal: AbortSignal,
    timeoutMs = cmdTimeoutMs,
  ): Promise<RunResult> {
    const r = await run(docker, args, { env, signal, timeoutMs });
    if (r.aborted) throw new EvalfleetError(ErrorCode.Unavailable, "grading aborted", { retryable: true });
    if (r.spawnError) throw new Infra("runtime", `cannot run ${docker}: ${r.spawnError.message}`);
    if (r.timedOut)
      throw new Infra(kind === "image_pull" ? "image_pull" : "timeout", `docker ${args[0]} timed out`);
    if (r.code !== 0) {
      const msg = `docker ${args[0]} failed (exit ${r.code}): ${r.stderr.trim() || r.stdout.trim()}`;
      throw new Infra(mentionsOutOfDisk(r.combined) ? "out_of_disk" : kind, msg);
    }
    return r;
  }

  async function grade(job: GradeJob, signal: AbortSignal): Promise<GradeOutcome> {
    const skipped = skipEmptyPatch(job);
    if (skipped) return skipped;
    const image = job.image;
    if (!image || !DIGEST.test(image.digest)) {
      throw new ValidationError(ErrorCode.InvalidMessage, "docker grading needs an image pinned by digest", [
        { path: "image.digest", reason: "expected sha256:<64 hex>, as recorded by gold validation" },
      ]);
    }
    const ref = `${image.name}@${image.digest}`;
    // Built before any container exists: an instance without version/test_patch fails fast, not mid-run.
    const evalScript = makeEvalScript(job.instance);
    const timeoutS = job.timeoutS ?? opts.defaultTimeoutS ?? DEFAULT_TIMEOUT_S;
    const container = gradeContainerName(job.instance.instance_id);
    const work = await mkdtemp(path.join(tmpdir(), "evalfleet-grade-"));
    const child = log.child({ instance: job.instance.instance_id, container });
    try {
      // Eval hosts are often pre-seeded with the images; only go to the registry when it is missing.
      const present = await run(docker, ["image", "inspect", "--format", "{{.Id}}", ref], {
        env,
        signal,
        timeoutMs: cmdTimeoutMs,
      });
      if (present.aborted)
        throw new EvalfleetError(ErrorCode.Unavailable, "grading aborted", { retryable: true });
      if (present.code !== 0) await dockerStep(["pull", ref], "image_pull", signal, pullTimeoutMs);
      await dockerStep(
        [
          "create",
          "--name",
          container,
          "--platform",
          platform,
          "--user",
          DOCKER_USER,
          ref,
          "tail",
          "-f",
          "/dev/null",
        ],
        "container_start",
        signal,
      );
      await dockerStep(["start", container], "container_start", signal);

      if (!isEmptyPatch(job.patch)) {
        const patchFile = path.join(work, "patch.diff");
        await writeFile(patchFile, job.patch ?? "");
        await dockerStep(["cp", patchFile, `${container}:${DOCKER_PATCH}`], "runtime", signal);
        const applied = await applyPatch(container, signal);
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

      const scriptFile = path.join(work, "eval.sh");
      await writeFile(scriptFile, evalScript);
      await dockerStep(["cp", scriptFile, `${container}:${DOCKER_EVAL_SCRIPT}`], "runtime", signal);
      const r = await run(docker, ["exec", container, "/bin/bash", DOCKER_EVAL_SCRIPT], {
        env,
        signal,
        timeoutMs: timeoutS * 1000,
      });
      if (r.aborted) throw new EvalfleetError(ErrorCode.Unavailable, "grading aborted", { retryable: true });
      if (r.spawnError) throw new Infra("runtime", `cannot run ${docker}: ${r.spawnError.message}`);
      if (r.timedOut) throw new Infra("timeout", `tests exceeded ${timeoutS} s`);
      return outcomeFromLog(job, r.combined, r.stderr);
    } catch (err) {
      if (err instanceof Infra) {
        child.warn({ kind: err.kind, err: err.message }, "infrastructure failure while grading");
        return infraFailure(err.kind, err.message);
      }
      throw err;
    } finally {
      // Always, whatever happened above: the container and its anonymous volumes go.
      const rmResult = await run(docker, ["rm", "-f", "-v", container], { env, timeoutMs: cmdTimeoutMs });
      if (rmResult.code !== 0 && !/No such container/i.test(rmResult.stderr)) {
        child.warn({ stderr: rmResult.stderr.trim() }, "container removal failed");
      }
      await rm(work, { recursive: true, force: true });
    }
  }

  /** GIT_APPLY_CMDS in order, each on DOCKER_PATCH in /testbed as root; the first exit 0 wins. */
  async function applyPatch(
    container: string,
    signal: AbortSignal,
  ): Promise<{ ok: boolean; output: string }> {
    let output = "";
    for (const cmd of APPLY_PATCH_COMMANDS) {
      const r = await run(
        docker,
        ["exec", "-w", DOCKER_WORKDIR, "-u", DOCKER_USER, container, ...cmd, DOCKER_PATCH],
        { env, signal, timeoutMs: cmdTimeoutMs },
      );
      if (r.aborted) throw new EvalfleetError(ErrorCode.Unavailable, "grading aborted", { retryable: true });
      if (r.spawnError) throw new Infra("runtime", `cannot run ${docker}: ${r.spawnError.message}`);
      if (r.timedOut) throw new Infra("timeout", `${cmd.join(" ")} timed out`);
      if (r.code === 0) return { ok: true, output: r.combined };
      // The daemon, not the patch, failed: say so instead of blaming the model.
      if (/Error response from daemon/i.test(r.stderr)) {
        throw new Infra(mentionsOutOfDisk(r.stderr) ? "out_of_disk" : "runtime", r.stderr.trim());
      }
      output = r.combined;
    }
    return { ok: false, output };
  }

  return { name: "docker", grade };
}
