import type { Command } from "commander";
import { loadSettings } from "../../config/index.js";
import { createLogger } from "../../lib/log.js";
import { FleetPacer } from "../../pacer/index.js";
import { openPlane } from "../../plane/connect.js";
import { runTask } from "../../task/run.js";

interface TaskFlags {
  run?: string;
  cell?: string;
  attempt?: string;
  gatewayUrl?: string;
  workdir?: string;
  keepWorkdir?: boolean;
}

/**
 * `evalfleet task`: the harness task entrypoint every launch backend starts. It gets only a job reference (flags,
 * or EVALFLEET_RUN / EVALFLEET_CELL / EVALFLEET_ATTEMPT), fetches the rest from NATS, and exits 0 once its one
 * AttemptResult is published — whatever the harness did. The run's key comes from EVALFLEET_RUN_KEY or KV, never
 * a flag. Every setting: `evalfleet config --role task`.
 */
export function register(program: Command): void {
  program
    .command("task")
    .description("Run one harness attempt from a job reference and publish its result")
    .option("--run <run>", "run name (default $EVALFLEET_RUN)")
    .option("--cell <cell>", "cell id (default $EVALFLEET_CELL)")
    .option("--attempt <n>", "attempt number (default $EVALFLEET_ATTEMPT)")
    .option("--gateway-url <url>", "the gateway (or a provider) calls go to (default $EVALFLEET_GATEWAY_URL)")
    .option("--workdir <dir>", "root of attempt workdirs (default $EVALFLEET_WORKDIR or a temp folder)")
    .option("--keep-workdir", "keep the attempt's folder after publishing")
    .action(async (flags: TaskFlags) => {
      const settings = loadSettings("task", { flags });
      const { job: ref, task } = settings;
      // A backend stops a task with SIGTERM: stop the harness's process group (it would outlive us otherwise),
      // then store and publish as for any other exit.
      const stop = new AbortController();
      const onSignal = (sig: NodeJS.Signals) => stop.abort(sig);
      process.once("SIGTERM", onSignal);
      process.once("SIGINT", onSignal);
      const logger = createLogger({ name: "task", level: settings.log.level });
      // Two containers (ECS): what the task creates in the shared tree, the harness (same group) may change.
      if (task.harnessRunner) process.umask(0o007);
      // As the attempt's own NATS user (its launcher's credential, on stdin locally): its own keys and subjects only.
      const plane = await openPlane({
        name: `task-${ref.run}-${ref.cell}-${ref.attempt}`,
        nats: settings.nats,
        ensure: false,
        attempt: ref,
      });
      // EVALFLEET_PACER=fleet: admission from the pool's fleet pacer over NATS (EVALFLEET_PACER_OWN=1 lets this
      // process own a pool no one owns); otherwise the shim admits every call and the gateway paces.
      const pacer =
        task.pacer === "fleet"
          ? await FleetPacer.open({ nc: plane.nc, canOwn: task.pacerOwn, log: logger })
          : undefined;
      let result: Awaited<ReturnType<typeof runTask>>;
      try {
        result = await runTask(ref, {
          plane,
          signal: stop.signal,
          logger,
          upstream: settings.gatewayUrl.url,
          workRoot: task.workRoot,
          mirrorRoot: task.mirrorRoot,
          keepWorkdir: task.keepWorkdir,
          env: settings.host.inheritedEnv,
          ...(pacer ? { pacer } : {}),
          ...(task.runKey ? { runKey: task.runKey } : {}),
          ...(task.gitRemoteBase ? { gitRemoteBase: task.gitRemoteBase } : {}),
        });
      } finally {
        await pacer?.close();
        await plane.close();
      }
      process.stdout.write(
        `${JSON.stringify({ run: ref.run, cell: ref.cell, attempt: ref.attempt, status: result.status, costNanoUsd: result.usage.costNanoUsd })}\n`,
      );
    });
}
