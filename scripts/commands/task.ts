import type { Command } from "commander";
import { openPlane } from "../../actors/runtime/connect.js";
import { FleetPacer } from "../../pacer/index.js";
import { createLogger } from "../../protocol/log.js";
import { readTaskRef } from "../../shim/task/ref.js";
import { runTask } from "../../shim/task/run.js";

interface TaskFlags {
  run?: string;
  cell?: string;
  attempt?: string;
  upstream?: string;
  workdir?: string;
  keepWorkdir?: boolean;
}

/**
 * `evalfleet task`: the harness task entrypoint every launch backend starts. It gets only a job reference (flags,
 * or EVALFLEET_RUN / EVALFLEET_CELL / EVALFLEET_ATTEMPT), fetches the rest from NATS_URL, and exits 0 once its one
 * AttemptResult is published — whatever the harness did. The run's key comes from EVALFLEET_RUN_KEY, never a flag.
 */
export function register(program: Command): void {
  program
    .command("task")
    .description("Run one harness attempt from a job reference and publish its result")
    .option("--run <run>", "run name (default $EVALFLEET_RUN)")
    .option("--cell <cell>", "cell id (default $EVALFLEET_CELL)")
    .option("--attempt <n>", "attempt number (default $EVALFLEET_ATTEMPT)")
    .option("--upstream <url>", "gateway or provider base URL (default $EVALFLEET_UPSTREAM_URL)")
    .option("--workdir <dir>", "root of attempt workdirs (default $EVALFLEET_WORKDIR or a temp folder)")
    .option("--keep-workdir", "keep the attempt's folder after publishing")
    .action(async (flags: TaskFlags) => {
      const ref = readTaskRef(flags);
      // A backend stops a task with SIGTERM: stop the harness's process group (it would outlive us otherwise),
      // then store and publish as for any other exit.
      const stop = new AbortController();
      const onSignal = (sig: NodeJS.Signals) => stop.abort(sig);
      process.once("SIGTERM", onSignal);
      process.once("SIGINT", onSignal);
      const logger = createLogger({ name: "task" });
      const plane = await openPlane({ name: `task-${ref.run}-${ref.cell}-${ref.attempt}`, ensure: false });
      // EVALFLEET_PACER=fleet: admission from the pool's fleet pacer over NATS (EVALFLEET_PACER_OWN=1 lets this
      // process own a pool no one owns); otherwise the shim admits every call and the gateway paces.
      const pacer =
        process.env.EVALFLEET_PACER === "fleet"
          ? await FleetPacer.open({
              nc: plane.nc,
              canOwn: process.env.EVALFLEET_PACER_OWN === "1",
              log: logger,
            })
          : undefined;
      let result: Awaited<ReturnType<typeof runTask>>;
      try {
        result = await runTask(ref, {
          plane,
          signal: stop.signal,
          logger,
          ...(pacer ? { pacer } : {}),
          ...(flags.upstream ? { upstream: flags.upstream } : {}),
          ...(flags.workdir ? { workRoot: flags.workdir } : {}),
          ...(flags.keepWorkdir ? { keepWorkdir: true } : {}),
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
