import type { Command } from "commander";
import { loadGatewayConfig } from "../../gateway-sidecar/config.js";
import { startGateway } from "../../gateway-sidecar/server.js";
import { FleetPacer } from "../../pacer/fleet-pacer.js";
import { createLogger } from "../../protocol/log.js";
import type { Pacer } from "../../protocol/pacer.js";
import { openDb } from "../../store/db.js";
import { migrate } from "../../store/migrations.js";

interface GatewayFlags {
  port: string;
  host: string;
  config?: string;
  dataDir?: string;
}

/**
 * `evalfleet gateway --port N`: one stateless gateway replica. PostgreSQL from DATABASE_URL (PGlite otherwise,
 * which only suits a single replica), the fleet pacer on NATS_URL when set. SIGTERM drains: no new connections,
 * calls in flight finish, then exit.
 */
export function register(program: Command): void {
  program
    .command("gateway")
    .description(
      "Run a gateway replica: per-run keys, aliases, spend log, run caps, rate limits fed to the pacer",
    )
    .option("--port <port>", "port to listen on", "8787")
    .option("--host <host>", "address to bind", "127.0.0.1")
    .option("--config <file>", "aliases and pools (JSON or YAML; default $EVALFLEET_GATEWAY_CONFIG)")
    .option("--data-dir <dir>", "PGlite data directory when DATABASE_URL is not set")
    .action(async (flags: GatewayFlags) => {
      const log = createLogger({ name: "gateway" });
      const configPath = flags.config ?? process.env.EVALFLEET_GATEWAY_CONFIG;
      const cfg = configPath ? await loadGatewayConfig(configPath) : { aliases: {}, pools: {} };
      const db = await openDb({
        ...(process.env.DATABASE_URL ? { url: process.env.DATABASE_URL } : {}),
        ...(flags.dataDir ? { dataDir: flags.dataDir } : {}),
        log,
      });
      await migrate(db, { log });
      let pacer: Pacer | undefined;
      let nc: { close(): Promise<void> } | undefined;
      if (process.env.NATS_URL) {
        const { connect } = await import("@nats-io/transport-node");
        const conn = await connect({
          servers: process.env.NATS_URL,
          name: "gateway",
          maxReconnectAttempts: -1,
        });
        nc = conn;
        pacer = await FleetPacer.open({ nc: conn, pools: cfg.pools, log });
      }
      const gw = await startGateway({
        db,
        aliases: cfg.aliases,
        port: Number(flags.port),
        host: flags.host,
        log,
        ...(pacer ? { pacer } : {}),
      });
      process.stdout.write(`gateway listening on ${gw.url}\n`);
      const stop = async () => {
        await gw.close();
        await pacer?.close();
        await nc?.close();
        await db.close();
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
