import type { Command } from "commander";
import { startGraderSupervisorFromSettings } from "../../actors/grader-supervisor/env.js";
import { runUntilStopped, startActors } from "../../actors/runtime/main.js";
import { loadSettings } from "../../config/index.js";
import { createLogger } from "../../lib/log.js";

export function register(program: Command): void {
  program
    .command("eval-worker")
    .description(
      "Grade on this eval host with its Docker: the grader-supervisor taking grade jobs, refusing to start where no Docker daemon answers (the host's socket at /var/run/docker.sock, or DOCKER_HOST)",
    )
    .option("--drain-ms <ms>", "how long in-flight grades may take to finish on SIGTERM", "60000")
    .option("--data-dir <dir>", "an embedded PGlite folder instead of PostgreSQL (one process only)")
    .action(async (opts: { drainMs: string; dataDir?: string }) => {
      const settings = loadSettings("eval-worker", { flags: opts });
      const log = createLogger({ name: "evalfleet", level: settings.log.level });
      const running = await startActors(["grader-supervisor"], {
        log,
        settings,
        registry: {
          // The scaler runs in the control plane's grader-supervisor, never on the hosts it scales.
          "grader-supervisor": (ctx) =>
            startGraderSupervisorFromSettings(ctx, { gradeJobs: "docker", evalTier: undefined }),
        },
      });
      log.info({ ids: running.actors.map((a) => a.id) }, "eval worker running");
      await runUntilStopped(running, log, Number(opts.drainMs));
    });
}
