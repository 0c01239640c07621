import type { Command } from "commander";
import { untilSignal } from "../../actors/runtime/main.js";
import { createLogger } from "../../protocol/log.js";
import { startLocalPlane } from "../local/up.js";

export function register(program: Command): void {
  program
    .command("up")
    .description(
      "Run the whole plane in the foreground until interrupted (NATS_URL or its own nats-server; DATABASE_URL or embedded PGlite)",
    )
    .option("--state-dir <dir>", "where embedded state (PGlite) lives", ".evalfleet")
    .action(async (opts: { stateDir: string }) => {
      const log = createLogger({ name: "evalfleet" });
      const plane = await startLocalPlane({ log, stateDir: opts.stateDir });
      process.stdout.write(
        `evalfleet is up: NATS ${plane.natsUrl}${plane.ownNats ? " (own nats-server)" : ""}, ${plane.dbLabel}\n` +
          `actors: ${plane.running.actors.map((a) => a.name).join(", ")}\n` +
          `submit a run with: NATS_URL=${plane.natsUrl} evalfleet submit run.yaml   (Ctrl-C to stop)\n`,
      );
      await untilSignal(log);
      await plane.stop();
    });
}
