/**
 * Instance images for tasks no official image exists for (the sample tasks, a task library's own repositories): the
 * offline base, the task's repository at /testbed at its base commit with history pruned (the layout the SWE-bench
 * eval script expects), owned by the grading user, its install commands run with no network. Pushed to the
 * configured registry and pinned by the digest it answers with.
 */
import { createHash } from "node:crypto";
import { mkdtemp, rename, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { ContainerError, type ContainerRuntime, type RegistryAuth } from "../containers/index.js";
import type { Logger } from "../lib/log.js";
import { silentLogger } from "../lib/log.js";
import { safeSlug } from "../protocol/names.js";
import { GRADE_UID } from "./base.js";
import { prepareTestbed } from "./testbed.js";

/** Labels every built instance image carries (read back by the grader and `images list`). */
export const ImageLabels = {
  task: "io.evalfleet.task",
  instance: "io.evalfleet.instance",
  baseCommit: "io.evalfleet.base-commit",
  /** What the image was built from: a hash of the repository, the install commands and the base image. */
  source: "io.evalfleet.source",
} as const;

export const TESTBED = "/testbed";

export interface BuildTaskInput {
  taskId: string;
  instanceId: string;
  /** The repository folder (a plain folder, or a git repository with `baseCommit`). */
  source: string;
  baseCommit?: string;
  /** Shell commands run in /testbed as the grading user at build time (no network: bring what they need). */
  install?: readonly string[];
  /** A content key of everything that decides a verdict besides the repository (the task's test command…). */
  sourceKey: string;
}

export interface BuildTaskOptions {
  base: string;
  /** `host:port` (or any registry prefix) the image is pushed to; without one it stays local, pinned by id. */
  registry?: string;
  /** Credentials for that registry. */
  auth?: RegistryAuth;
  logger?: Logger;
  signal?: AbortSignal;
}

export interface BuiltImage {
  /** `registry/evalfleet/task-<id>` */
  name: string;
  /** The registry's digest, or the image id when there is no registry. */
  digest: string;
  /** `name@digest`, what tasks and grades reference. */
  ref: string;
  baseCommit: string;
  sourceKey: string;
  /** false when an image of the same source was already in the registry. */
  built: boolean;
}

export function taskImageName(taskId: string, registry?: string): string {
  const name = `evalfleet/task-${safeSlug(taskId.toLowerCase(), 100)}`;
  return registry ? `${registry}/${name}` : name;
}

function dockerfile(base: string, input: BuildTaskInput, baseCommit: string, sourceKey: string): string {
  const label = (k: string, v: string) => `${k}=${JSON.stringify(v)}`;
  const lines = [
    `FROM ${base}`,
    `COPY --chown=${GRADE_UID}:${GRADE_UID} testbed ${TESTBED}`,
    `WORKDIR ${TESTBED}`,
    // The eval script runs git as root in official images and as the grading user here: both must trust /testbed.
    `RUN git config --system --add safe.directory ${TESTBED} && test "$(git -C ${TESTBED} rev-parse HEAD)" = ${baseCommit}`,
  ];
  if (input.install?.length) {
    lines.push(`USER ${GRADE_UID}:${GRADE_UID}`);
    for (const cmd of input.install)
      lines.push(`RUN cd ${TESTBED} && bash -euo pipefail -c ${JSON.stringify(cmd)}`);
    lines.push("USER root");
    // Install steps must leave the repository at its base commit (a build product is ignored, not a change).
    lines.push(`RUN test -z "$(git -C ${TESTBED} status --porcelain --untracked-files=no)"`);
  }
  lines.push(
    `LABEL ${[
      label("io.evalfleet.task", input.taskId),
      label("io.evalfleet.instance", input.instanceId),
      label("io.evalfleet.base-commit", baseCommit),
      label("io.evalfleet.source", sourceKey),
    ].join(" ")}`,
    "",
  );
  return lines.join("\n");
}

/**
 * Build (or find) the instance image of one task. The tag is the source key, so an unchanged task is not built
 * twice: when the registry (or, without one, the daemon) already holds that tag, its digest is returned.
 */
export async function buildTaskImage(
  rt: ContainerRuntime,
  input: BuildTaskInput,
  opts: BuildTaskOptions,
): Promise<BuiltImage> {
  const log = opts.logger ?? silentLogger();
  const name = taskImageName(input.taskId, opts.registry);
  const testbed = await prepareTestbed(input.source, input.baseCommit);
  try {
    const sourceKey = createHash("sha256")
      .update(JSON.stringify([input.sourceKey, testbed.baseCommit, input.install ?? [], opts.base]))
      .digest("hex");
    const tag = `${name}:${sourceKey.slice(0, 24)}`;
    const existing = await existingDigest(rt, tag, opts.registry !== undefined, registryOpts(opts));
    if (existing) {
      const ref = `${name}@${existing}`;
      return { name, digest: existing, ref, baseCommit: testbed.baseCommit, sourceKey, built: false };
    }
    const ctx = await mkdtemp(path.join(tmpdir(), "evalfleet-image-"));
    try {
      await rename(testbed.dir, path.join(ctx, "testbed"));
      await writeFile(
        path.join(ctx, "Dockerfile"),
        dockerfile(opts.base, input, testbed.baseCommit, sourceKey),
      );
      log.info({ task: input.taskId, image: tag }, "building the instance image");
      const id = await rt.build(ctx, { tag, ...(opts.signal ? { signal: opts.signal } : {}) });
      const digest = opts.registry ? await rt.push(tag, registryOpts(opts)) : id;
      return {
        name,
        digest,
        ref: `${name}@${digest}`,
        baseCommit: testbed.baseCommit,
        sourceKey,
        built: true,
      };
    } finally {
      await rm(ctx, { recursive: true, force: true });
    }
  } finally {
    await rm(testbed.root, { recursive: true, force: true });
  }
}

/**
 * The digest of an already built `tag`: present in the daemon (pushed again, which costs a few HEAD requests when the
 * registry has it, and repairs a registry that lost it), or in the registry (pulled). null: build it.
 */
function registryOpts(opts: BuildTaskOptions): { auth?: RegistryAuth; signal?: AbortSignal } {
  return { ...(opts.auth ? { auth: opts.auth } : {}), ...(opts.signal ? { signal: opts.signal } : {}) };
}

async function existingDigest(
  rt: ContainerRuntime,
  tag: string,
  registry: boolean,
  ropts: { auth?: RegistryAuth; signal?: AbortSignal },
): Promise<string | null> {
  const local = await rt.inspectImage(tag);
  if (local) return registry ? rt.push(tag, ropts) : local.id;
  if (!registry) return null;
  try {
    await rt.pull(tag, ropts);
  } catch (err) {
    if (err instanceof ContainerError && (err.failure === "not_found" || err.failure === "pull")) return null;
    throw err;
  }
  return rt.repoDigest(tag, tag.slice(0, tag.lastIndexOf(":")));
}
