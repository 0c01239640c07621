import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import type { Command } from "commander";
import { buildGraders } from "../../actors/grader-supervisor/actor.js";
import { buildAndRecord, imageResolver } from "../../actors/grader-supervisor/image-ops.js";
import {
  imageManifest,
  type ValidationOutcome,
  validateAndRecord,
} from "../../actors/grader-supervisor/validate.js";
import { libraryDir, loadTaskLibrary, selectTasks } from "../../actors/planner/library.js";
import { parseSubmission } from "../../actors/planner/plan.js";
import { openDatabase } from "../../actors/runtime/main.js";
import { type ImageSettings, loadSettings } from "../../config/index.js";
import { ContainerRuntime } from "../../containers/index.js";
import { createLogger, type Logger } from "../../lib/log.js";
import { table } from "../../lib/table.js";
import type { TaskSpec } from "../../protocol/config.js";
import { ErrorCode, ValidationError } from "../../protocol/errors.js";
import type { Db } from "../../store/db.js";

/**
 * `evalfleet validate-env`: grade every task's gold patch and the empty patch, in the image the task is graded in
 * (its pinned image, a folder task's built image, a SWE-bench task's mirror) or, for a folder task without one or
 * without Docker, in a checkout; record each task valid or invalid with the reason, the image (name@digest) and
 * which grader, in task_validation. The planner refuses runs on tasks not validated, or invalid.
 */

export interface ValidateEnvOptions {
  /** A task library folder. */
  tasks?: string;
  /** A run file: its task_library_path and task selection. */
  run?: string;
  db: Db;
  log: Logger;
  /** the environment graded processes start from (secrets removed) */
  env: Readonly<Record<string, string | undefined>>;
  localLogFormat?: string;
  /** The registry and base rootfs images are built from and pushed to. */
  images: ImageSettings;
  /** The container runtime (default: probed where DOCKER_HOST or the default socket says); null: none. */
  runtime?: ContainerRuntime | null;
  /** Build the folder tasks' images first (`--build`), so they are validated in containers. */
  build?: boolean;
  /** Tasks validated at once. */
  concurrency?: number;
  onResult?: (r: ValidationOutcome) => void;
}

/** The tasks `--tasks DIR` or `--run FILE` select, and their library folder. */
export async function selectedTasks(opts: {
  tasks?: string;
  run?: string;
}): Promise<{ dir: string; tasks: TaskSpec[] }> {
  if ((opts.tasks === undefined) === (opts.run === undefined)) {
    throw new ValidationError(ErrorCode.InvalidConfig, "say which tasks to validate", [
      { path: "--tasks / --run", reason: "give exactly one: a task library folder, or a run file" },
    ]);
  }
  if (opts.tasks !== undefined) {
    const library = await loadTaskLibrary(path.resolve(opts.tasks));
    return { dir: library.dir, tasks: [...library.tasks.keys()].sort().map((id) => library.tasks.get(id)!) };
  }
  const file = path.resolve(opts.run as string);
  let data: Buffer;
  try {
    data = await readFile(file);
  } catch (err) {
    throw new ValidationError(ErrorCode.InvalidConfig, `cannot read --run ${file}`, [
      {
        path: "--run",
        reason: `${(err as NodeJS.ErrnoException).code ?? String(err)}: pass a run YAML or JSON`,
      },
    ]);
  }
  const config = parseSubmission(data);
  const library = await loadTaskLibrary(libraryDir(config, path.dirname(file)));
  return { dir: library.dir, tasks: selectTasks(config, library) };
}

export async function validateEnv(opts: ValidateEnvOptions): Promise<ValidationOutcome[]> {
  const { dir, tasks } = await selectedTasks(opts);
  const rt =
    opts.runtime !== undefined
      ? opts.runtime
      : await ContainerRuntime.probe({ env: opts.env as NodeJS.ProcessEnv, logger: opts.log }).then((p) =>
          p.ok ? p.runtime : null,
        );
  const ctx = { db: opts.db, rt, settings: opts.images, log: opts.log };
  if (opts.build) await buildAndRecord(ctx, tasks, dir);
  const graders = buildGraders(
    { log: opts.log, env: opts.env, ...(rt ? { containers: rt } : {}) },
    undefined,
  );
  return await validateAndRecord(opts.db, tasks, {
    graders,
    libraryDir: dir,
    resolveImage: imageResolver(ctx),
    concurrency: opts.concurrency ?? 1,
    ...(opts.localLogFormat ? { localLogFormat: opts.localLogFormat } : {}),
    ...(opts.onResult ? { onResult: opts.onResult } : {}),
  });
}

interface Flags {
  tasks?: string;
  run?: string;
  json?: boolean;
  strict?: boolean;
  dataDir?: string;
  logFormat?: string;
  manifest?: string;
  build?: boolean;
  registry?: string;
  rootfs?: string;
  concurrency: string;
}

export function register(program: Command): void {
  program
    .command("validate-env")
    .description(
      "Grade each task's gold patch and the empty patch; mark tasks whose gold does not resolve (or whose empty patch does) invalid",
    )
    .option("--tasks <dir>", "a task library folder")
    .option("--run <file>", "a run file: validates the tasks it selects")
    .option("--json", "print one JSON object per task")
    .option("--strict", "exit 1 when any task is invalid")
    .option("--data-dir <dir>", "an embedded PGlite folder instead of PostgreSQL")
    .option("--log-format <name>", "log parser for local tasks that name none (default pytest)")
    .option(
      "--build",
      "build the folder tasks' instance images first (`evalfleet images build`), to validate in them",
    )
    .option("--registry <host:port>", "the private registry built images go to (EVALFLEET_REGISTRY)")
    .option(
      "--rootfs <dir>",
      "the debootstrapped rootfs the offline base is made from (EVALFLEET_BASE_ROOTFS)",
    )
    .option("--concurrency <n>", "tasks validated at once", "2")
    .option(
      "--manifest <file>",
      "write the valid docker tasks' images (name@digest) for the eval-host AMI build",
    )
    .action(async (flags: Flags) => {
      const settings = loadSettings("validate-env", { flags });
      const log = createLogger({ name: "validate-env", level: settings.log.level });
      const opened = await openDatabase(settings.database, { command: "validate-env", log });
      const db = opened.db;
      try {
        const results = await validateEnv({
          db,
          log,
          env: settings.host.inheritedEnv,
          images: settings.images,
          build: flags.build === true,
          ...(flags.tasks ? { tasks: flags.tasks } : {}),
          ...(flags.run ? { run: flags.run } : {}),
          ...(flags.logFormat ? { localLogFormat: flags.logFormat } : {}),
          concurrency: Math.max(1, Number.parseInt(flags.concurrency, 10) || 1),
          onResult: (r) => {
            if (flags.json) process.stdout.write(`${JSON.stringify(r)}\n`);
          },
        });
        if (!flags.json) {
          const rows = results.map((r) => [
            r.taskId,
            r.verdict,
            r.backend === "docker" ? "docker (container)" : r.backend === "local" ? "local (checkout)" : "-",
            r.imageDigest ? r.imageDigest.slice(0, 19) : "-",
            r.reason ?? "",
          ]);
          process.stdout.write(`${table(["task", "verdict", "grader", "digest", "reason"], rows)}\n`);
          const invalid = results.filter((r) => r.verdict === "invalid").length;
          const failed = results.filter((r) => r.verdict === "error").length;
          process.stdout.write(
            `${results.length - invalid - failed} valid or skipped, ${invalid} invalid` +
              (failed ? `, ${failed} not validated (the environment failed: run validate-env again)` : "") +
              "\n",
          );
        }
        if (flags.manifest)
          await writeFile(flags.manifest, `${JSON.stringify(imageManifest(results), null, 2)}\n`);
        if (flags.strict && results.some((r) => r.verdict === "invalid")) process.exitCode = 1;
        // A task the environment kept from validating is not done: say so in the exit code too.
        if (results.some((r) => r.verdict === "error")) process.exitCode = 1;
      } finally {
        await opened.close();
      }
    });
}
