import type { Command } from "commander";
import { type Plan, planRun } from "../../actors/planner/plan.js";
import { printJson, table } from "./output.js";
import { readRunFile } from "./submit.js";

/** Read a run file and plan it locally: the same validation and expansion the planner does. */
export async function planFile(file: string): Promise<Plan> {
  // readRunFile makes task_library_path absolute, so the base directory no longer matters.
  return await planRun(await readRunFile(file), process.cwd());
}

/** The seed's dry-run table: the first 20 cells (Cell ID, Harness, Model, Task, Repeat) and the total. */
export function dryRunTable(plan: Plan, limit = 20): string {
  const rows = plan.cells
    .slice(0, limit)
    .map((c) => [c.cellId, c.harness.name, c.model.name, c.task.id, String(c.repeat)]);
  const more = plan.cells.length > limit ? `\n... and ${plan.cells.length - limit} more` : "";
  return `${table(["Cell ID", "Harness", "Model", "Task", "Repeat"], rows)}${more}\n\nTotal cells: ${plan.cells.length}`;
}

export function register(program: Command): void {
  program
    .command("plan")
    .description("Validate a run file and expand its matrix without running anything (a dry run)")
    .argument("<run-file>", "run config (YAML or JSON)")
    .option("--dry-run", "print the first 20 cells and the total (the default: plan never executes)")
    .option("--json", "print every cell as one JSON line")
    .action(async (file: string, opts: { json?: boolean }) => {
      const plan = await planFile(file);
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
        `Run ${plan.config.name}: ${plan.tasks.length} task(s) from ${plan.libraryDir}\n\n`,
      );
      process.stdout.write(`${dryRunTable(plan)}\n`);
    });
}
