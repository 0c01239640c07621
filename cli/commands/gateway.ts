import type { Command } from "commander";
import { openDatabase } from "../../actors/runtime/main.js";
import { loadSettings } from "../../config/index.js";
import { openGatewayPacer } from "../../gateway/pacer.js";
import { runAliasResolver } from "../../gateway/run-aliases.js";
import { startGateway } from "../../gateway/server.js";
import { createLogger } from "../../lib/log.js";
import { startModelCallTracing } from "../../lib/otel.js";
import { connectNats } from "../../plane/connect.js";
import type { Pacer } from "../../protocol/pacer.js";

interface GatewayFlags {
  port?: string;
  host?: string;
  config?: string;
  dataDir?: string;
}

/**
 * `evalfleet gateway`: one stateless gateway replica (settings: `evalfleet config --role gateway`). PostgreSQL
 * from DATABASE_URL or PG* (an embedded PGlite only with --data-dir, which suits a single replica); provider keys
 * from PROVIDER_KEYS (or ANTHROPIC_API_KEY / OPENAI_API_KEY); aliases from the runs' model names, plus the static
 * ones of EVALFLEET_GATEWAY_CONFIG; the fleet pacer on NATS when NATS_URL is given. SIGTERM drains: no new
 * connections, calls in flight finish, then exit.
 */
export function register(program: Command): void {
  program
    .command("gateway")
    .description(
      "Run a gateway replica: per-run keys, aliases, spend log, run caps, rate limits fed to the pacer",
    )
    .option("--port <port>", "port to listen on (default $EVALFLEET_GATEWAY_PORT or 8787)")
    .option("--host <host>", "address to bind (default $EVALFLEET_GATEWAY_HOST or 127.0.0.1)")
    .option("--config <file>", "static aliases and pools (JSON or YAML; default $EVALFLEET_GATEWAY_CONFIG)")
    .option("--data-dir <dir>", "an embedded PGlite folder instead of PostgreSQL (a single replica only)")
    .action(async (flags: GatewayFlags) => {
      const settings = loadSettings("gateway", { flags });
      const log = createLogger({ name: "gateway", level: settings.log.level });
      const opened = await openDatabase(settings.database, { command: "gateway", log });
      const db = opened.db;
      let pacer: Pacer | undefined;
      let nc: { close(): Promise<void> } | undefined;
      if (settings.nats.configured) {
        const conn = await connectNats(settings.nats, { name: "gateway" });
        nc = conn;
        pacer = await openGatewayPacer(conn, settings.file.pools, log);
      }
      const tracer = settings.otel.endpoint
        ? startModelCallTracing({ endpoint: settings.otel.endpoint, serviceName: "evalfleet-gateway" })
        : undefined;
      const gw = await startGateway({
        db,
        aliases: settings.file.aliases,
        resolveAlias: runAliasResolver(db, settings.providers),
        port: settings.listen.port,
        host: settings.listen.host,
        log,
        ...(pacer ? { pacer } : {}),
        ...(tracer ? { tracer } : {}),
      });
      process.stdout.write(`gateway listening on ${gw.url}\n`);
      const stop = async () => {
        await gw.close();
        await tracer?.shutdown();
        await pacer?.close();
        await nc?.close();
        await opened.close();
      };
      await new Promise<void>((resolve) => {
        const onSignal = () => {
          stop().then(resolve, resolve);
        };
        process.once("SIGTERM", onSignal);
        process.once("SIGINT", onSignal);
      });
    });
}
