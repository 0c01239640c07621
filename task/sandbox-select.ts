/**
 * Which sandbox an attempt's harness runs in, from the task's environment: the launch backend decides and says so
 * (`EVALFLEET_SANDBOX=container`: a Docker API answered where it runs; `process`: none did), an ECS task has the
 * other container (`EVALFLEET_HARNESS_RUNNER`). A task told `container` never falls back to running the harness
 * unsandboxed: when the runtime or the image is not there, the attempt fails and says why.
 */
import { ContainerRuntime } from "../containers/index.js";
import { ensureBaseImage } from "../images/base.js";
import { ensureHarnessImage } from "../images/harness.js";
import type { Logger } from "../lib/log.js";
import type { RunConfig, TaskSpec } from "../protocol/config.js";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import type { TaskRef } from "./ref.js";
import { ContainerSandbox, type HarnessSandbox, ProcessSandbox, RunnerSandbox } from "./sandbox.js";
import type { AttemptDirs } from "./workdir.js";

/** The environment variable the launch backend sets: `container` or `process`. */
export const SANDBOX_ENV = "EVALFLEET_SANDBOX";
/** The debootstrapped rootfs the offline base image is made from (tasks without an `image`). */
export const DEFAULT_BASE_ROOTFS = "/var/lib/efbase-rootfs";

/** The instance image of a task: its own (`image`, a SWE-bench image by digest), else the offline base. */
export async function instanceImage(
  rt: ContainerRuntime,
  image: string | undefined,
  env: NodeJS.ProcessEnv,
  log: Logger,
): Promise<string> {
  if (image) return image;
  if (env.EVALFLEET_SANDBOX_IMAGE) return env.EVALFLEET_SANDBOX_IMAGE;
  const rootfsDir = env.EVALFLEET_BASE_ROOTFS || DEFAULT_BASE_ROOTFS;
  return (await ensureBaseImage(rt, { rootfsDir, logger: log })).ref;
}

export async function selectSandbox(opts: {
  env: NodeJS.ProcessEnv;
  ref: TaskRef;
  task: TaskSpec;
  config: RunConfig;
  dirs: AttemptDirs;
  log: Logger;
}): Promise<HarnessSandbox> {
  const { env } = opts;
  if (env.EVALFLEET_HARNESS_RUNNER) return new RunnerSandbox(env.EVALFLEET_HARNESS_RUNNER);
  const want = env[SANDBOX_ENV] ?? "process";
  if (want === "process") return new ProcessSandbox();
  if (want !== "container")
    throw new EvalfleetError(
      ErrorCode.InvalidConfig,
      `${SANDBOX_ENV}=${want} is not one of container, process`,
    );
  let rt: ContainerRuntime;
  try {
    rt = await ContainerRuntime.connect({ env, logger: opts.log });
  } catch (err) {
    throw new EvalfleetError(
      ErrorCode.Unavailable,
      `this attempt must run in a container, but ${(err as Error).message}`,
      { cause: err },
    );
  }
  const instance = await instanceImage(rt, opts.task.image, env, opts.log);
  const image = await ensureHarnessImage(rt, instance, { logger: opts.log });
  return ContainerSandbox.open({
    runtime: rt,
    image: image.id,
    ref: opts.ref,
    dirs: opts.dirs,
    limits: opts.config.sandbox,
    log: opts.log,
    // A SWE-bench image's environment expects its repository at /testbed (editable installs point there): the
    // attempt's checkout is mounted over it, so the image's own copy (and any history in it) is out of sight.
    ...(opts.task.image ? { repoInside: "/testbed" } : {}),
  });
}

/** What the launcher decided for its tasks, and why, in words for `start` / `up`. */
export interface SandboxDecision {
  kind: "container" | "process";
  detail: string;
  runtime?: ContainerRuntime;
}

/**
 * `EVALFLEET_SANDBOX`: `auto` (default: containers when a Docker API answers — DOCKER_HOST or the default socket,
 * Podman's too — else processes), `container` (required: an error when none answers), `process` (unsandboxed).
 */
export async function resolveSandbox(env: NodeJS.ProcessEnv, log: Logger): Promise<SandboxDecision> {
  const want = env[SANDBOX_ENV] ?? "auto";
  if (!["auto", "container", "process"].includes(want))
    throw new EvalfleetError(
      ErrorCode.InvalidConfig,
      `${SANDBOX_ENV}=${want} is not one of auto, container, process`,
    );
  if (want === "process") return { kind: "process", detail: `${SANDBOX_ENV}=process` };
  const probe = await ContainerRuntime.probe({ env, logger: log });
  if (!probe.ok) {
    if (want === "container")
      throw new EvalfleetError(ErrorCode.Unavailable, `${SANDBOX_ENV}=container, but ${probe.reason}`);
    return { kind: "process", detail: `no container runtime answered (${probe.reason})` };
  }
  const i = probe.runtime.info;
  return {
    kind: "container",
    detail: `${i.podman ? "Podman" : "Docker"} ${i.serverVersion} at ${i.endpoint}`,
    runtime: probe.runtime,
  };
}

/** Build (or find) the harness image tasks without an image of their own use, so the first attempts do not wait. */
export async function warmSandboxImage(
  rt: ContainerRuntime,
  env: NodeJS.ProcessEnv,
  log: Logger,
): Promise<string> {
  const instance = await instanceImage(rt, undefined, env, log);
  return (await ensureHarnessImage(rt, instance, { logger: log })).ref;
}

/** The line `start`, `up` and the dispatcher print about it. */
export function sandboxLine(d: SandboxDecision, image?: string): string {
  return d.kind === "container"
    ? `sandbox: every attempt's harness in its own container (${d.detail}${image ? `; image ${image}` : ""}): no network but its shim, no credentials, its workdir the only host path`
    : `sandbox: NONE — attempts run UNSANDBOXED as plain processes of this user (${d.detail}); a harness can read this machine's files and reach its network. Start Docker or Podman (or set DOCKER_HOST) to run each attempt in a container.`;
}
