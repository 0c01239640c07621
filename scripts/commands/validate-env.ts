import { readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import type { Command } from "commander";
import { buildGraders } from "../../actors/grader-supervisor/actor.js";
import {
  dockerDigestResolver,
  imageManifest,
  type ValidationOutcome,
  validateAndRecord,
} from "../../actors/grader-supervisor/validate.js";
import { libraryDir, loadTaskLibrary, selectTasks } from "../../actors/planner/library.js";
import { parseSubmission } from "../../actors/planner/plan.js";
import type { TaskSpec } from "../../protocol/config.js";
import { ErrorCode, ValidationError } from "../../protocol/errors.js";
import { createLogger, type Logger } from "../../protocol/log.js";
import type { Db } from "../../store/db.js";
import { openDb } from "../../store/db.js";
import { migrate } from "../../store/migrations.js";
import { table } from "./output.js";

/**
 * `evalfleet validate-env`: grade every task's gold patch and the empty patch, record each task valid or invalid
 * (with the reason and the digest it was validated on) in task_validation. Runs leave invalid tasks out.
 */

export interface ValidateEnvOptions {
  /** A task library folder. */
  tasks?: string;
  /** A run file: its task_library_path and task selection. */
  run?: string;
  db: Db;
  log: Logger;
  localLogFormat?: string;
  dockerPath?: string;
  /** Tasks validated at once. */
  concurrency?: number;
  onResult?: (r: ValidationOutcome) => void;
}

async function selectedTasks(opts: {
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
  const graders = buildGraders(
    {
      log: opts.log,
      ...(opts.dockerPath ? { dockerPath: opts.dockerPath } : {}),
    },
    undefined,
  );
  return await validateAndRecord(opts.db, tasks, {
    graders,
    libraryDir: dir,
    resolveDigest: dockerDigestResolver(opts.dockerPath),
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
  docker?: string;
  manifest?: string;
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
    .option("--data-dir <dir>", "PGlite data directory when DATABASE_URL is not set")
    .option("--log-format <name>", "log parser for local tasks that name none (default pytest)")
    .option("--docker <path>", "the docker executable")
    .option("--concurrency <n>", "tasks validated at once", "2")
    .option(
      "--manifest <file>",
      "write the valid docker tasks' images (name@digest) for the eval-host AMI build",
    )
    .action(async (flags: Flags) => {
      const log = createLogger({ name: "validate-env", level: process.env.EVALFLEET_LOG_LEVEL ?? "warn" });
      const db = await openDb({
        ...(process.env.DATABASE_URL ? { url: process.env.DATABASE_URL } : {}),
        ...(flags.dataDir ? { dataDir: flags.dataDir } : {}),
        log,
      });
      try {
        await migrate(db, { log });
        const results = await validateEnv({
          db,
          log,
          ...(flags.tasks ? { tasks: flags.tasks } : {}),
          ...(flags.run ? { run: flags.run } : {}),
          ...(flags.logFormat ? { localLogFormat: flags.logFormat } : {}),
          ...(flags.docker ? { dockerPath: flags.docker } : {}),
          concurrency: Math.max(1, Number.parseInt(flags.concurrency, 10) || 1),
          onResult: (r) => {
            if (flags.json) process.stdout.write(`${JSON.stringify(r)}\n`);
          },
        });
        if (!flags.json) {
          const rows = results.map((r) => [
            r.taskId,
            r.verdict,
            r.backend ?? "-",
            r.imageDigest ? r.imageDigest.slice(0, 19) : "-",
            r.reason ?? "",
          ]);
          process.stdout.write(`${table(["task", "verdict", "backend", "digest", "reason"], rows)}\n`);
          const invalid = results.filter((r) => r.verdict === "invalid").length;
          process.stdout.write(`${results.length - invalid} valid or skipped, ${invalid} invalid\n`);
        }
        if (flags.manifest)
          await writeFile(flags.manifest, `${JSON.stringify(imageManifest(results), null, 2)}\n`);
        if (flags.strict && results.some((r) => r.verdict === "invalid")) process.exitCode = 1;
      } finally {
        await db.close();
      }
    });
}
