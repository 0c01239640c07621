import type { Command } from "commander";
import { actorNames } from "../../actors/index.js";
import { runUntilStopped, startActors } from "../../actors/runtime/main.js";
import { isActorRole, loadActorSettings } from "../../config/index.js";
import { createLogger } from "../../lib/log.js";
import { startMetricsServer } from "../../lib/metrics.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";

export function register(program: Command): void {
  program
    .command("actor")
    .description(
      `Run actors in the foreground (settings from the environment: \`evalfleet config --role <actor>\`): ${actorNames().join(", ")}`,
    )
    .argument("<name...>", "actor name(s)")
    .option("--drain-ms <ms>", "how long in-flight work may take to finish on SIGTERM", "10000")
    .option("--data-dir <dir>", "an embedded PGlite folder instead of PostgreSQL (one process only)")
    .action(async (names: string[], opts: { drainMs: string; dataDir?: string }) => {
      const unknown = names.filter((n) => !isActorRole(n));
      if (unknown.length > 0)
        throw new EvalfleetError(
          ErrorCode.InvalidConfig,
          `unknown actor ${unknown.join(", ")}; known actors: ${actorNames().join(", ")}`,
        );
      const settings = loadActorSettings(names.filter(isActorRole), { flags: opts });
      const log = createLogger({ name: "evalfleet", level: settings.log.level });
      // Before the actors, so a port in use fails the start instead of leaving actors running without it.
      const metrics =
        settings.metrics.port === null
          ? undefined
          : await startMetricsServer({ host: settings.metrics.host, port: settings.metrics.port });
      const running = await startActors(names, { log, settings }).catch(async (err: unknown) => {
        await metrics?.close();
        throw err;
      });
      log.info(
        { actors: names, ids: running.actors.map((a) => a.id), metrics: metrics?.url },
        "actors running",
      );
      try {
        await runUntilStopped(running, log, Number(opts.drainMs));
      } finally {
        await metrics?.close();
      }
    });
}
