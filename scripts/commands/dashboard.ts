import type { Command } from "commander";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { createLogger } from "../../protocol/log.js";
import { startDashboard } from "../dashboard/server.js";
import { printJson } from "./output.js";
import { openCliDb } from "./report.js";
import { openViewerPlane } from "./watch.js";

interface DashboardFlags {
  port: string;
  host: string;
  json?: boolean;
  stateDir: string;
}

export function register(program: Command): void {
  program
    .command("dashboard")
    .description(
      "Serve a live web dashboard: runs, a grid of cells, spend against the cap, pacer state, drill-down per attempt",
    )
    .option("--port <port>", "port to listen on (0: any free port)", "8080")
    .option("--host <host>", "address to bind", "127.0.0.1")
    .option("--json", "print the URL as JSON once listening")
    .option(
      "--state-dir <dir>",
      "where embedded state (PGlite) lives when DATABASE_URL is unset",
      ".evalfleet",
    )
    .action(async (flags: DashboardFlags) => {
      const port = Number(flags.port);
      if (!Number.isInteger(port) || port < 0 || port > 65_535)
        throw new EvalfleetError(ErrorCode.InvalidConfig, `--port must be 0-65535, got "${flags.port}"`);
      const log = createLogger({ name: "dashboard", level: process.env.EVALFLEET_LOG_LEVEL ?? "warn" });
      const plane = await openViewerPlane("evalfleet-dashboard");
      const { db, label } = await openCliDb(flags.stateDir).catch(async (err: unknown) => {
        await plane.close();
        throw err;
      });
      const dash = await startDashboard({ plane, db, port, host: flags.host, log });
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
      await db.close();
    });
}
