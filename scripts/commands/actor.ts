import type { Command } from "commander";
import { actorNames } from "../../actors/index.js";
import { startActors, untilSignal } from "../../actors/runtime/main.js";
import { createLogger } from "../../protocol/log.js";

export function register(program: Command): void {
  program
    .command("actor")
    .description(
      `Run one actor in the foreground (NATS_URL and DATABASE_URL from the environment): ${actorNames().join(", ")}`,
    )
    .argument("<name...>", "actor name(s)")
    .option("--drain-ms <ms>", "how long in-flight work may take to finish on SIGTERM", "10000")
    .action(async (names: string[], opts: { drainMs: string }) => {
      const log = createLogger({ name: "evalfleet" });
      const running = await startActors(names, { log });
      log.info({ actors: names, ids: running.actors.map((a) => a.id) }, "actors running");
      await untilSignal(log);
      await running.shutdown(Number(opts.drainMs));
    });
}
