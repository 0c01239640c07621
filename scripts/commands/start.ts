import { resolve } from "node:path";
import type { Command } from "commander";
import { createLogger } from "../../protocol/log.js";
import { startLocalPlane } from "../local/up.js";
import { dryRunTable, planFile } from "./plan.js";
import { readRunFile, submitRun } from "./submit.js";

/** The sample run `npm start` shows a new user. */
export const SAMPLE_RUN = resolve(import.meta.dirname, "../../examples/sample-run.yaml");

export function register(program: Command): void {
  program
    .command("start")
    .description(
      "The main job on embedded defaults: bring the plane up, plan and submit the sample run, show it",
    )
    .option("--run <file>", "run file to submit instead of the sample", SAMPLE_RUN)
    .option("--state-dir <dir>", "where embedded state (PGlite) lives", ".evalfleet")
    .action(async (opts: { run: string; stateDir: string }) => {
      const log = createLogger({ name: "evalfleet", level: process.env.EVALFLEET_LOG_LEVEL ?? "warn" });
      const plan = await planFile(opts.run);
      process.stdout.write(
        `Dry run of ${plan.config.name} (${plan.tasks.length} tasks):\n\n${dryRunTable(plan)}\n\n`,
      );
      const plane = await startLocalPlane({ log, stateDir: opts.stateDir });
      try {
        process.stdout.write(`plane up: NATS ${plane.natsUrl}, ${plane.dbLabel}\n`);
        const ev = await submitRun(await readRunFile(opts.run), {
          timeoutMs: 60_000,
          servers: plane.natsUrl,
        });
        process.stdout.write(`planner: ${ev.kind}: ${ev.message}\n`);
      } finally {
        await plane.stop();
      }
    });
}
