import type { Command } from "commander";
import { untilSignal } from "../../actors/runtime/main.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { createLogger } from "../../protocol/log.js";
import { startLocalPlane } from "../local/up.js";

export function register(program: Command): void {
  program
    .command("up")
    .description(
      "Run the whole plane in the foreground until interrupted (NATS_URL or its own nats-server; DATABASE_URL or embedded PGlite)",
    )
    .option("--state-dir <dir>", "where embedded state (PGlite, NATS store, workdirs) lives", ".evalfleet")
    .option(
      "--gateway-port <port>",
      "the gateway's port (the default is where `evalfleet submit` looks)",
      "8787",
    )
    .action(async (opts: { stateDir: string; gatewayPort: string }) => {
      const log = createLogger({ name: "evalfleet" });
      const gatewayPort = Number(opts.gatewayPort);
      if (!Number.isInteger(gatewayPort) || gatewayPort < 0 || gatewayPort > 65535)
        throw new EvalfleetError(
          ErrorCode.InvalidConfig,
          `--gateway-port must be a port number, got "${opts.gatewayPort}"`,
        );
      const plane = await startLocalPlane({ log, stateDir: opts.stateDir, gatewayPort });
      process.stdout.write(
        `evalfleet is up: NATS ${plane.natsUrl}${plane.ownNats ? " (own nats-server)" : ""}, ${plane.dbLabel}\n` +
          `gateway ${plane.gateway.url} in front of ${plane.upstreams.describe}\n` +
          `actors: ${plane.running.actors.map((a) => a.name).join(", ")}\n` +
          `submit a run with: NATS_URL=${plane.natsUrl} evalfleet submit run.yaml   (Ctrl-C to stop)\n`,
      );
      await untilSignal(log);
      await plane.stop();
    });
}
