/**
 * Instance images for a task library: every task shipped as a folder (`repo_path` + `test_command`) gets an image
 * of its own — the offline base, its repository at /testbed at the base commit, history pruned — pushed to the
 * configured registry and pinned by digest. The image's tag and labels carry a source key over everything that
 * decides a verdict besides the repository (the test command, the log format, the expected tests, the test patch),
 * so a task whose tests change gets a new digest, and results cached under the old one are never reused.
 */
import { createHash } from "node:crypto";
import path from "node:path";
import type { ContainerRuntime, RegistryAuth } from "../containers/index.js";
import type { Logger } from "../lib/log.js";
import type { TaskSpec } from "../protocol/config.js";
import { type BuiltImage, buildTaskImage } from "./build.js";

/** True when the task is shipped as a folder with its own test command (it gets a built image). */
export function isFolderTask(task: TaskSpec): boolean {
  return task.repo_path !== undefined && task.test_command !== undefined;
}

/** The instance id images and grades are keyed by. */
export function instanceIdOf(task: TaskSpec): string {
  return task.instance_id ?? task.id;
}

/** Install steps a task file may give (`install: [cmd, …]`), run in /testbed at build time without a network. */
function installOf(task: TaskSpec): string[] {
  const v = (task as Record<string, unknown>).install;
  return Array.isArray(v) ? v.filter((c): c is string => typeof c === "string") : [];
}

/** Everything of the task, besides its repository, that decides a verdict in its image. */
export function taskSourceKey(task: TaskSpec): string {
  const key = {
    id: task.id,
    instance: instanceIdOf(task),
    repo: task.repo ?? null,
    version: task.version ?? null,
    test_command: task.test_command ?? null,
    log_format: (task as Record<string, unknown>).log_format ?? null,
    FAIL_TO_PASS: task.FAIL_TO_PASS,
    PASS_TO_PASS: task.PASS_TO_PASS,
    test_patch: task.test_patch,
    install: installOf(task),
  };
  return createHash("sha256").update(JSON.stringify(key)).digest("hex");
}

export interface LibraryBuildOptions {
  /** The task library folder a relative `repo_path` resolves in. */
  libraryDir: string;
  /** The base image (ensureBaseImage's ref). */
  base: string;
  registry?: string;
  auth?: RegistryAuth;
  logger?: Logger;
  signal?: AbortSignal;
  /** Called as each image is ready. */
  onImage?: (task: TaskSpec, image: BuiltImage) => void | Promise<void>;
}

export interface LibraryImage extends BuiltImage {
  taskId: string;
  instanceId: string;
}

/** Build (or find) the image of every folder task, one at a time (builds share the daemon's two cores). */
export async function buildLibraryImages(
  rt: ContainerRuntime,
  tasks: readonly TaskSpec[],
  opts: LibraryBuildOptions,
): Promise<LibraryImage[]> {
  const out: LibraryImage[] = [];
  for (const task of tasks.filter(isFolderTask)) {
    const image = await buildTaskImage(
      rt,
      {
        taskId: task.id,
        instanceId: instanceIdOf(task),
        source: path.resolve(opts.libraryDir, task.repo_path as string),
        ...(task.base_commit ? { baseCommit: task.base_commit } : {}),
        install: installOf(task),
        sourceKey: taskSourceKey(task),
      },
      {
        base: opts.base,
        ...(opts.registry ? { registry: opts.registry } : {}),
        ...(opts.auth ? { auth: opts.auth } : {}),
        ...(opts.logger ? { logger: opts.logger } : {}),
        ...(opts.signal ? { signal: opts.signal } : {}),
      },
    );
    await opts.onImage?.(task, image);
    out.push({ ...image, taskId: task.id, instanceId: instanceIdOf(task) });
  }
  return out;
}

/** One entry of the manifest the eval-host AMI pre-pulls (packer/files/prepull.sh): an image pinned by digest. */
export interface ManifestEntry {
  instance_id: string;
  image: string;
}

const REGISTRY_DIGEST_REF = /^[a-z0-9.-]+(:[0-9]+)?\/[a-z0-9._/-]+@sha256:[0-9a-f]{64}$/;

/**
 * The Packer pre-pull manifest: every image that lives in a registry, pinned by digest, one per instance (the first
 * given wins). Images only in the local daemon (no registry) cannot be pre-pulled and are left out.
 */
export function prepullManifest(
  entries: readonly ManifestEntry[],
  generatedBy: string,
): { generated_by: string; images: ManifestEntry[] } {
  const seen = new Set<string>();
  const images: ManifestEntry[] = [];
  for (const e of entries) {
    if (seen.has(e.instance_id) || !REGISTRY_DIGEST_REF.test(e.image)) continue;
    seen.add(e.instance_id);
    images.push({ instance_id: e.instance_id, image: e.image });
  }
  return { generated_by: generatedBy, images };
}
