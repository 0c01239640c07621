/**
 * What `evalfleet images`, `validate-env` and `start` share: building a library's instance images and mirroring
 * official ones, each recorded by digest in the images table, and finding the image a task is graded in.
 */
import { existsSync } from "node:fs";
import path from "node:path";
import type { ImageSettings } from "../../config/index.js";
import { ContainerError, type ContainerRuntime } from "../../containers/index.js";
import { ensureBaseImage } from "../../images/base.js";
import {
  buildLibraryImages,
  instanceIdOf,
  isFolderTask,
  type LibraryImage,
  taskSourceKey,
} from "../../images/library.js";
import { type MirroredImage, mirrorImage, officialImageRef } from "../../images/mirror.js";
import { type PinnedImage, parsePinned, pinImage } from "../../images/resolve.js";
import type { Logger } from "../../lib/log.js";
import type { TaskSpec } from "../../protocol/config.js";
import { ErrorCode, ValidationError } from "../../protocol/errors.js";
import type { Db } from "../../store/db.js";
import { builtImageFor, mirroredImageFor, recordImage } from "../../store/images.js";

export interface ImageContext {
  db: Db;
  /** null: no container runtime answered (folder tasks are then graded in checkouts) */
  rt: ContainerRuntime | null;
  settings: ImageSettings;
  log: Logger;
  signal?: AbortSignal;
}

function needRuntime(ctx: ImageContext, what: string): ContainerRuntime {
  if (ctx.rt) return ctx.rt;
  throw new ValidationError(ErrorCode.Unavailable, `${what} needs a container runtime`, [
    {
      path: "DOCKER_HOST",
      reason:
        "no Docker API answered (DOCKER_HOST, or the default socket): start dockerd or Podman's socket, or set DOCKER_HOST",
    },
  ]);
}

/** Build (or find) every folder task's image from the offline base, push it, record it by digest. */
export async function buildAndRecord(
  ctx: ImageContext,
  tasks: readonly TaskSpec[],
  libraryDir: string,
  onImage?: (task: TaskSpec, image: LibraryImage) => void,
): Promise<LibraryImage[]> {
  const rt = needRuntime(ctx, "building instance images");
  if (!tasks.some(isFolderTask)) return [];
  if (!existsSync(path.join(ctx.settings.baseRootfs, "var/lib/dpkg/status")))
    throw new ValidationError(ErrorCode.InvalidConfig, "no base rootfs to build instance images from", [
      {
        path: "EVALFLEET_BASE_ROOTFS",
        reason: `${ctx.settings.baseRootfs} is not a debootstrapped Debian rootfs: make one with \`debootstrap --variant=minbase --include=git,patch,python3,python3-pytest,ca-certificates bookworm ${ctx.settings.baseRootfs}\` (as root, ≈ 60 s), or point --rootfs / EVALFLEET_BASE_ROOTFS at one`,
      },
    ]);
  const base = await ensureBaseImage(rt, {
    rootfsDir: ctx.settings.baseRootfs,
    logger: ctx.log,
    ...(ctx.signal ? { signal: ctx.signal } : {}),
  });
  return buildLibraryImages(rt, tasks, {
    libraryDir,
    base: base.ref,
    ...(ctx.settings.registry ? { registry: ctx.settings.registry } : {}),
    ...(ctx.settings.registryAuth ? { auth: ctx.settings.registryAuth } : {}),
    logger: ctx.log,
    ...(ctx.signal ? { signal: ctx.signal } : {}),
    onImage: async (task, image) => {
      await recordImage(ctx.db, {
        name: image.name,
        digest: image.digest,
        kind: "built",
        taskId: task.id,
        instanceId: instanceIdOf(task),
        source: taskSourceKey(task),
        baseCommit: image.baseCommit,
      });
      onImage?.(task, { ...image, taskId: task.id, instanceId: instanceIdOf(task) });
    },
  });
}

/** What to mirror: an instance, and the task it belongs to when a library named it. */
export interface MirrorTarget {
  instanceId: string;
  taskId: string | null;
}

/** Mirror each instance's official image from `from` into the configured registry; record each by digest. */
export async function mirrorAndRecord(
  ctx: ImageContext,
  targets: readonly MirrorTarget[],
  from: string,
  tag: string,
  onImage?: (t: MirrorTarget, image: MirroredImage) => void,
): Promise<MirroredImage[]> {
  const rt = needRuntime(ctx, "mirroring images");
  const to = ctx.settings.registry;
  if (!to)
    throw new ValidationError(ErrorCode.InvalidConfig, "images mirror needs the registry to copy into", [
      {
        path: "--registry",
        reason: "pass --registry host:port (or set EVALFLEET_REGISTRY): the private registry",
      },
    ]);
  const out: MirroredImage[] = [];
  for (const t of targets) {
    const image = await mirrorImage(rt, {
      instanceId: t.instanceId,
      from,
      to,
      tag,
      ...(ctx.settings.registryAuth ? { targetAuth: ctx.settings.registryAuth } : {}),
      logger: ctx.log,
      ...(ctx.signal ? { signal: ctx.signal } : {}),
    });
    await recordImage(ctx.db, {
      name: image.name,
      digest: image.digest,
      kind: "mirrored",
      taskId: t.taskId,
      instanceId: t.instanceId,
      source: image.source,
      baseCommit: null,
    });
    onImage?.(t, image);
    out.push(image);
  }
  return out;
}

/**
 * The image a task is graded in when its file pins none (gold validation's resolveImage): a folder task's image
 * built from its current source (null without one, or without a container runtime: graded in a checkout); a
 * SWE-bench task's own image pinned by digest, else its recorded mirror, else the official image pulled and pinned.
 */
export function imageResolver(ctx: ImageContext): (task: TaskSpec) => Promise<PinnedImage | null> {
  return async (task) => {
    const own = parsePinned(task.image);
    if (own) return own;
    if (isFolderTask(task)) {
      if (!ctx.rt) return null;
      const built = await builtImageFor(ctx.db, task.id, taskSourceKey(task));
      return built ? { name: built.name, digest: built.digest } : null;
    }
    const rt = needRuntime(ctx, `task ${task.id} (graded in its SWE-bench image)`);
    if (task.image) return pinImage(rt, task.image, ctx.signal ? { signal: ctx.signal } : {});
    const mirrored = await mirroredImageFor(ctx.db, instanceIdOf(task));
    if (mirrored) return { name: mirrored.name, digest: mirrored.digest };
    const official = officialImageRef(instanceIdOf(task));
    try {
      return await pinImage(rt, official, ctx.signal ? { signal: ctx.signal } : {});
    } catch (err) {
      if (!(err instanceof ContainerError)) throw err;
      throw new Error(
        `no mirror of ${instanceIdOf(task)} is recorded and ${official} could not be had (${err.message}); mirror it: evalfleet images mirror --instance ${instanceIdOf(task)} --from <registry holding the official images>`,
      );
    }
  };
}
