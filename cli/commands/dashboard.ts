import type { Command } from "commander";
import { loadSettings } from "../../config/index.js";
import { startDashboard } from "../../dashboard/server.js";
import { createLogger } from "../../lib/log.js";
import { planeNats } from "../../local/plane-nats.js";
import { printJson } from "./output.js";
import { openCliDb } from "./report.js";
import { openViewerPlane } from "./watch.js";

interface DashboardFlags {
  port?: string;
  host?: string;
  json?: boolean;
  stateDir?: string;
}

export function register(program: Command): void {
  program
    .command("dashboard")
    .description(
      "Serve a live web dashboard: runs, a grid of cells, spend against the cap, pacer state, drill-down per attempt",
    )
    .option("--port <port>", "port to listen on (0: any free port; default 8080)")
    .option("--host <host>", "address to bind (default 127.0.0.1)")
    .option("--json", "print the URL as JSON once listening")
    .option(
      "--state-dir <dir>",
      "where embedded state (PGlite) lives when DATABASE_URL is unset (default .evalfleet)",
    )
    .action(async (flags: DashboardFlags) => {
      const settings = loadSettings("dashboard", { flags });
      const { port, host } = settings.listen;
      const log = createLogger({ name: "dashboard", level: settings.log.level });
      const plane = await openViewerPlane("evalfleet-dashboard", await planeNats(settings));
      const opened = await openCliDb(settings, "dashboard").catch(async (err: unknown) => {
        await plane.close();
        throw err;
      });
      const { db, label } = opened;
      const dash = await startDashboard({
        plane,
        db,
        dbLabel: label,
        port,
        host,
        log,
        access: settings.access,
      });
      if (flags.json) printJson({ url: dash.url, port: dash.port, database: label });
      else
        process.stdout.write(
          `dashboard: ${dash.url}  (live state from NATS, results from ${label}; Ctrl-C to stop)\n`,
        );
      await new Promise<void>((resolve) => {
        process.once("SIGINT", () => resolve());
        process.once("SIGTERM", () => resolve());
      });
      await dash.close();
      await plane.close();
      await opened.close();
    });
}
