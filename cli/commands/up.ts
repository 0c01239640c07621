import type { Command } from "commander";
import { untilSignal } from "../../actors/runtime/main.js";
import { DEFAULT_GATEWAY_URL, loadSettings, localPlaneCredsFile } from "../../config/index.js";
import { createLogger } from "../../lib/log.js";
import { startLocalPlane } from "../../local/up.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";

/** The port of a URL on this machine (127.0.0.1 / localhost), else undefined. */
function localPort(url: string): number | undefined {
  try {
    const u = new URL(url.split(",")[0] ?? "");
    return ["127.0.0.1", "localhost"].includes(u.hostname) && u.port ? Number(u.port) : undefined;
  } catch {
    return undefined;
  }
}

export function register(program: Command): void {
  program
    .command("up")
    .description(
      "Run the whole plane in the foreground until interrupted (NATS_URL or its own nats-server; DATABASE_URL or embedded PGlite)",
    )
    .option(
      "--state-dir <dir>",
      "where embedded state (PGlite, NATS store, workdirs) lives (default .evalfleet)",
    )
    .option("--gateway-port <port>", "the gateway's port (default 8787, where `evalfleet submit` looks)")
    .option(
      "--real-providers",
      "forward model calls to the real providers whose keys are set (ANTHROPIC_API_KEY / OPENAI_API_KEY); without it the scripted provider answers, whatever keys are exported",
    )
    .action(async (opts: { stateDir?: string; gatewayPort?: string; realProviders?: boolean }) => {
      const { realProviders, ...flags } = opts;
      const settings = loadSettings("local", { flags });
      const log = createLogger({ name: "evalfleet", level: settings.log.level });
      const asked = settings.nats.servers.join(",");
      // Its own nats-server (when none answers at NATS_URL) listens where every other command looks by default.
      const natsPort = localPort(asked);
      const plane = await startLocalPlane({
        log,
        settings,
        command: "up",
        realProviders: realProviders === true,
        ...(natsPort !== undefined ? { natsPort } : {}),
      });
      // Its own nats-server admits no anonymous client: other commands use the plane's credential, found in the
      // default state folder, else named here.
      const creds =
        plane.ownNats && opts.stateDir !== undefined
          ? `NATS_CREDS=${localPlaneCredsFile(settings.state.dir)} `
          : "";
      const natsEnv = `${plane.natsUrl === asked ? "" : `NATS_URL=${plane.natsUrl} `}${creds}`;
      const gatewayEnv =
        plane.gateway.url === DEFAULT_GATEWAY_URL ? "" : `EVALFLEET_GATEWAY_URL=${plane.gateway.url} `;
      const stateFlag = opts.stateDir === undefined ? "" : ` --state-dir ${opts.stateDir}`;
      process.stdout.write(
        `evalfleet is up: NATS ${plane.natsUrl}${plane.ownNats ? " (own nats-server)" : ""}, ${plane.dbLabel}\n` +
          `gateway ${plane.gateway.url} in front of ${plane.upstreams.describe}\n` +
          `actors: ${plane.running.actors.map((a) => a.name).join(", ")}\n` +
          `${plane.sandbox}\n` +
          `${plane.grading.line}\n` +
          `submit a run with: ${natsEnv}${gatewayEnv}evalfleet submit run.yaml\n` +
          `then, from other terminals: ${natsEnv}evalfleet watch${stateFlag} | dashboard${stateFlag} | report RUN${stateFlag}   (Ctrl-C to stop)\n`,
      );
      const why = await Promise.race([untilSignal(log).then(() => null), plane.running.failed]);
      await plane.stop();
      if (why)
        throw new EvalfleetError(
          ErrorCode.Unavailable,
          `actor ${why.actor} stopped working (${why.cause}); the plane was stopped. Run \`evalfleet up\` again.`,
        );
    });
}
