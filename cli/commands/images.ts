import { writeFile } from "node:fs/promises";
import type { Command } from "commander";
import {
  buildAndRecord,
  type ImageContext,
  type MirrorTarget,
  mirrorAndRecord,
} from "../../actors/grader-supervisor/image-ops.js";
import { openDatabase } from "../../actors/runtime/main.js";
import { loadSettings } from "../../config/index.js";
import { ContainerRuntime } from "../../containers/index.js";
import { instanceIdOf, isFolderTask, prepullManifest } from "../../images/library.js";
import { createLogger } from "../../lib/log.js";
import { table } from "../../lib/table.js";
import { ErrorCode, ValidationError } from "../../protocol/errors.js";
import type { Db } from "../../store/db.js";
import { type ImageRecord, listImages } from "../../store/images.js";
import { printJson } from "./output.js";
import { selectedTasks } from "./validate-env.js";

/**
 * `evalfleet images build | mirror | list`: instance images by digest.
 *
 * - build: every folder task of a library (or run) gets its image — the offline base (a debootstrapped Debian rootfs,
 *   this host's node, a grading user), its repository at /testbed at the base commit, history pruned — pushed to
 *   the registry (EVALFLEET_REGISTRY / --registry) and recorded by digest;
 * - mirror: the official SWE-bench images (`swebench/sweb.eval.x86_64.<instance>`, `__` written `_1776_`) copied from
 *   a source registry into the private one, recorded by digest;
 * - list: what the images table holds.
 *
 * Each can write the manifest the eval-host AMI pre-pulls (`--manifest FILE`, packer/files/prepull.sh).
 */

interface Flags {
  tasks?: string;
  run?: string;
  instance?: string[];
  from?: string;
  tag: string;
  task?: string;
  registry?: string;
  rootfs?: string;
  dataDir?: string;
  manifest?: string;
  json?: boolean;
}

async function withContext<T>(
  command: string,
  flags: Flags,
  needDocker: boolean,
  fn: (ctx: ImageContext) => Promise<T>,
): Promise<T> {
  const settings = loadSettings("images", { flags });
  const log = createLogger({ name: `images ${command}`, level: settings.log.level });
  const probe = needDocker
    ? await ContainerRuntime.probe({ env: settings.host.inheritedEnv as NodeJS.ProcessEnv, logger: log })
    : null;
  if (probe && !probe.ok)
    throw new ValidationError(ErrorCode.Unavailable, `images ${command} needs a container runtime`, [
      { path: "DOCKER_HOST", reason: `${probe.reason}` },
    ]);
  const opened = await openDatabase(settings.database, { command: `images ${command}`, log });
  try {
    return await fn({ db: opened.db, rt: probe?.ok ? probe.runtime : null, settings: settings.images, log });
  } finally {
    await opened.close();
  }
}

async function writeManifest(
  file: string | undefined,
  entries: Array<{ instance_id: string; image: string }>,
  by: string,
) {
  if (!file) return;
  const manifest = prepullManifest(entries, by);
  await writeFile(file, `${JSON.stringify(manifest, null, 2)}\n`);
  process.stdout.write(`manifest: ${manifest.images.length} image(s) pinned by digest in ${file}\n`);
}

function rowsOf(records: readonly ImageRecord[]): string[][] {
  return records.map((r) => [
    r.kind,
    r.taskId ?? "-",
    r.instanceId,
    `${r.name}@${r.digest}`,
    r.recordedAt ?? "",
  ]);
}

/** The latest image per instance, for a manifest of what the database holds. */
function latestPerInstance(records: readonly ImageRecord[]): ImageRecord[] {
  const seen = new Set<string>();
  return records.filter((r) => !seen.has(r.instanceId) && seen.add(r.instanceId));
}

export async function listCommand(
  db: Db,
  flags: Pick<Flags, "task" | "json" | "manifest">,
): Promise<ImageRecord[]> {
  const records = await listImages(db, flags.task ? { taskIds: [flags.task] } : {});
  if (flags.json) for (const r of records) printJson(r);
  else if (records.length === 0)
    process.stdout.write("no images recorded: run `evalfleet images build` or `evalfleet images mirror`\n");
  else process.stdout.write(`${table(["kind", "task", "instance", "image", "recorded"], rowsOf(records))}\n`);
  await writeManifest(
    flags.manifest,
    latestPerInstance(records).map((r) => ({ instance_id: r.instanceId, image: `${r.name}@${r.digest}` })),
    "evalfleet images list",
  );
  return records;
}

function libraryFlags(flags: Flags): { tasks?: string; run?: string } {
  return { ...(flags.tasks ? { tasks: flags.tasks } : {}), ...(flags.run ? { run: flags.run } : {}) };
}

export function register(program: Command): void {
  const images = program
    .command("images")
    .description("Instance images by digest: build a library's, mirror SWE-bench's, list what is recorded");
  const common = (c: Command) =>
    c
      .option("--registry <host:port>", "the private registry images are pushed to (EVALFLEET_REGISTRY)")
      .option("--data-dir <dir>", "an embedded PGlite folder instead of PostgreSQL")
      .option("--manifest <file>", "write the eval-host AMI's pre-pull manifest (images pinned by digest)")
      .option("--json", "print one JSON object per image");

  common(
    images
      .command("build")
      .description(
        "Build each folder task's instance image (offline Debian base, the repository at /testbed at its base commit, history pruned), push it, record its digest",
      )
      .option("--tasks <dir>", "a task library folder")
      .option("--run <file>", "a run file: the tasks it selects")
      .option(
        "--rootfs <dir>",
        "the debootstrapped rootfs the offline base is made from (EVALFLEET_BASE_ROOTFS)",
      ),
  ).action(async (flags: Flags) => {
    const { dir, tasks } = await selectedTasks(libraryFlags(flags));
    if (!tasks.some(isFolderTask))
      throw new ValidationError(ErrorCode.InvalidConfig, "no task to build an image for", [
        {
          path: flags.tasks ?? flags.run ?? "--tasks",
          reason:
            "images are built for tasks shipped as folders (repo_path + test_command); SWE-bench tasks use the official images: evalfleet images mirror",
        },
      ]);
    await withContext("build", flags, true, async (ctx) => {
      if (!ctx.settings.registry && !flags.json)
        process.stdout.write(
          "no registry (EVALFLEET_REGISTRY / --registry): images stay in this daemon, pinned by image id\n",
        );
      const built = await buildAndRecord(ctx, tasks, dir, (task, image) => {
        if (flags.json) printJson({ task: task.id, image: image.ref, built: image.built });
        else
          process.stdout.write(`${task.id}: ${image.ref}${image.built ? " (built)" : " (already built)"}\n`);
      });
      await writeManifest(
        flags.manifest,
        built.map((b) => ({ instance_id: b.instanceId, image: b.ref })),
        "evalfleet images build",
      );
    });
  });

  common(
    images
      .command("mirror")
      .description(
        "Copy the official SWE-bench images (swebench/sweb.eval.x86_64.<instance>) from a source registry into the private one, by digest",
      )
      .requiredOption("--from <registry>", "where the official images are: a registry (docker.io, host:port)")
      .option("--tasks <dir>", "a task library folder: its SWE-bench tasks' instances")
      .option("--run <file>", "a run file: the SWE-bench tasks it selects")
      .option("--instance <id...>", "instance ids (astropy__astropy-12907 …)")
      .option("--tag <tag>", "the source tag", "latest"),
  ).action(async (flags: Flags) => {
    const targets: MirrorTarget[] = (flags.instance ?? []).map((i) => ({ instanceId: i, taskId: null }));
    if (flags.tasks || flags.run) {
      const { tasks } = await selectedTasks(libraryFlags(flags));
      for (const t of tasks)
        if (!isFolderTask(t) && t.track !== "open_ended")
          targets.push({ instanceId: instanceIdOf(t), taskId: t.id });
    }
    if (targets.length === 0)
      throw new ValidationError(ErrorCode.InvalidConfig, "nothing to mirror", [
        {
          path: "--instance / --tasks / --run",
          reason: "name instances (--instance ID…) or a library / run file holding SWE-bench tasks",
        },
      ]);
    await withContext("mirror", flags, true, async (ctx) => {
      const done = await mirrorAndRecord(ctx, targets, flags.from as string, flags.tag, (t, image) => {
        if (flags.json)
          printJson({ instance: t.instanceId, task: t.taskId, image: image.ref, source: image.source });
        else process.stdout.write(`${t.instanceId}: ${image.ref} (from ${image.source})\n`);
      });
      await writeManifest(
        flags.manifest,
        done.map((m, i) => ({ instance_id: targets[i]?.instanceId ?? "", image: m.ref })),
        "evalfleet images mirror",
      );
    });
  });

  common(
    images
      .command("list")
      .description("The images recorded by digest, newest first")
      .option("--task <id>", "only this task's images"),
  ).action(async (flags: Flags) => {
    await withContext("list", flags, false, (ctx) => listCommand(ctx.db, flags));
  });
}
