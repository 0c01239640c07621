import type { Command } from "commander";
import { runHarnessRunner } from "../../task/runner.js";

export function register(program: Command): void {
  program
    .command("harness-runner")
    .description(
      "The harness container of a two-container attempt (ECS): run each command the task container leaves in DIR/control, in its own process group, until the task says done",
    )
    .argument("<dir>", "the volume both containers share (the task's EVALFLEET_HARNESS_RUNNER)")
    .option("--idle-exit-s <s>", "exit 1 if no command arrives within this long", "900")
    .action(async (dir: string, opts: { idleExitS: string }) => {
      process.exitCode = await runHarnessRunner(dir, {
        idleExitMs: Number(opts.idleExitS) * 1000,
        log: (line) => process.stderr.write(`harness-runner: ${line}\n`),
      });
    });
}
