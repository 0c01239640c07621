import { existsSync } from "node:fs";
import path from "node:path";
import type { Command } from "commander";
import { type Plan, planRun, type ValidationLookup } from "../../actors/planner/plan.js";
import { openDatabase } from "../../actors/runtime/main.js";
import { loadSettings } from "../../config/index.js";
import { createLogger } from "../../lib/log.js";
import { table } from "../../lib/table.js";
import { formatIssues } from "../../protocol/errors.js";
import { getTaskValidations } from "../../store/grades.js";
import { printJson } from "./output.js";
import { readRunFile } from "./submit.js";

/**
 * Read a run file and plan it locally: the same validation and expansion the planner does, and — given the
 * validation records — the same gold-validation gate.
 */
export async function planFile(file: string, validations?: ValidationLookup): Promise<Plan> {
  // readRunFile makes task_library_path absolute (next to the run file): locally, that folder is the root.
  const config = await readRunFile(file);
  return await planRun(config, [config.task_library_path], validations);
}

/** The seed's dry-run table: the first 20 cells (Cell ID, Harness, Model, Task, Repeat) and the total. */
export function dryRunTable(plan: Plan, limit = 20): string {
  const rows = plan.cells
    .slice(0, limit)
    .map((c) => [c.cellId, c.harness.name, c.model.name, c.task.id, String(c.repeat)]);
  const more = plan.cells.length > limit ? `\n... and ${plan.cells.length - limit} more` : "";
  return `${table(["Cell ID", "Harness", "Model", "Task", "Repeat"], rows)}${more}\n\nTotal cells: ${plan.cells.length}`;
}

/**
 * The validation records the planner would read (PostgreSQL when configured, else the embedded database of the
 * state folder, when there is one); with neither, an empty set: no task has been validated here.
 */
async function withValidations<T>(
  flags: { stateDir?: string },
  fn: (lookup: ValidationLookup, where: string) => Promise<T>,
): Promise<T> {
  const settings = loadSettings("plan", { flags });
  const log = createLogger({ name: "plan", level: settings.log.level });
  let database = settings.database;
  const dataDir = path.join(settings.state.dir, "pglite");
  if (database.kind === "none" && existsSync(dataDir))
    database = { kind: "pglite", dataDir, label: `embedded PGlite (${dataDir})` };
  if (database.kind === "none")
    return fn(
      async () => new Map(),
      `no results database (DATABASE_URL unset, none at ${dataDir}): no task is validated here`,
    );
  const opened = await openDatabase(database, { command: "plan", log });
  try {
    return await fn((ids) => getTaskValidations(opened.db, ids), opened.label);
  } finally {
    await opened.close();
  }
}

export function register(program: Command): void {
  program
    .command("plan")
    .description(
      "Validate a run file and expand its matrix without running anything (a dry run), with the planner's gold-validation verdict",
    )
    .argument("<run-file>", "run config (YAML or JSON)")
    .option("--dry-run", "print the first 20 cells and the total (the default: plan never executes)")
    .option("--json", "print every cell as one JSON line")
    .option("--unvalidated", "plan as `submit --unvalidated` would: tasks not gold-validated run anyway")
    .option("--state-dir <dir>", "where `start` / `up` keep the embedded database (its validation records)")
    .action(async (file: string, opts: { json?: boolean; unvalidated?: boolean; stateDir?: string }) => {
      // Expanded first without the gate, so a refused run still shows its matrix and why it would not run.
      const matrix = await planFile(file);
      if (opts.unvalidated) matrix.config.unvalidated = true;
      await withValidations(opts, async (lookup, where) => {
        let plan: Plan;
        try {
          plan = await planRun(matrix.config, [matrix.libraryDir], lookup);
        } catch (err) {
          if (!opts.json)
            process.stdout.write(
              `Run ${matrix.config.name}: ${matrix.tasks.length} task(s) from ${matrix.libraryDir}\n\n${dryRunTable(matrix)}\n\nThe planner would REFUSE this run (validation records: ${where}):\n`,
            );
          throw err;
        }
        if (opts.json) {
          for (const c of plan.cells)
            printJson({
              cell_id: c.cellId,
              harness: c.harness.name,
              model: c.model.name,
              review_model: c.reviewModel?.name ?? null,
              task: c.task.id,
              track: c.task.track,
              repeat: c.repeat,
              trace_id: c.traceId,
              phase_trace_ids: c.phaseTraceIds,
              pool: c.pool,
              budget_exempt: c.exempt,
            });
          return;
        }
        process.stdout.write(
          `Run ${plan.config.name}: ${plan.tasks.length} task(s) from ${plan.libraryDir}\n\n${dryRunTable(plan)}\n`,
        );
        if (plan.unvalidated.length > 0)
          process.stdout.write(
            `\nUNVALIDATED (--unvalidated): the planner runs these cells though ${plan.unvalidated.length} task(s) are not gold-validated:\n${formatIssues(plan.unvalidated)}\n`,
          );
        else
          process.stdout.write(
            `\nThe planner will run these cells: every graded task is gold-validated (${where}).\n`,
          );
      });
    });
}
