import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Command } from "commander";
import { loadSettings } from "../../config/index.js";
import { createLogger } from "../../lib/log.js";
import { connectNats } from "../../plane/connect.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { usdToNano } from "../../protocol/money.js";
import { safeSlug } from "../../protocol/names.js";
import { redactSecrets } from "../../protocol/redact.js";
import { startShim } from "../../shim/index.js";

interface ShimFlags {
  port?: string;
  host?: string;
  upstream: string;
  run: string;
  cell: string;
  attempt: string;
  budgetUsd?: string;
  maxTurns?: string;
  pool?: string;
  traceId?: string;
  ledgerSpool?: string;
  stopTimeoutSeconds: string;
}

/** `--budget-usd "1.25"` → 1_250_000_000n nano-USD, exactly (no float on the way). */
function budgetFlagNano(usd: string): bigint {
  if (!/^\d+(?:\.\d{1,9})?$/.test(usd.trim()))
    throw new EvalfleetError(
      ErrorCode.InvalidConfig,
      `--budget-usd '${usd}' is not a decimal with at most 9 places: give dollars such as 2 or 0.25`,
    );
  return usdToNano(usd);
}

function positiveInt(name: string, v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0)
    throw new EvalfleetError(ErrorCode.InvalidConfig, `${name} '${v}' is not a non-negative integer`);
  return n;
}

/** Where a standalone shim keeps unacked ledger rows unless told: one file per run, cell and attempt. */
function defaultSpool(run: string, cell: string, attempt: number): string {
  return join(tmpdir(), `evalfleet-shim-${safeSlug(run, 60)}-${safeSlug(cell, 80)}-${attempt}.ledger.jsonl`);
}

/**
 * `evalfleet shim`: the local proxy shim standalone (tests, operators). Ledger rows and progress go to NATS when
 * NATS_URL is given (else to stderr); the run's key is EVALFLEET_RUN_KEY, never a flag. SIGTERM / SIGINT stop it
 * within --stop-timeout-seconds whatever NATS is doing: rows NATS has not acked stay in the spool file, and the next
 * shim started with that file publishes them first.
 */
export function register(program: Command): void {
  program
    .command("shim")
    .description("Run the local proxy shim: meter, cap and shield every model call of one attempt")
    .requiredOption("--upstream <url>", "gateway or provider base URL")
    .requiredOption("--run <run>", "run name")
    .requiredOption("--cell <cell>", "cell id")
    .requiredOption("--attempt <n>", "attempt number")
    .option("--port <port>", "port to listen on (0: any free port)", "0")
    .option("--host <host>", "address to bind", "127.0.0.1")
    .option("--budget-usd <usd>", "attempt budget in USD")
    .option("--max-turns <n>", "attempt turn cap")
    .option("--pool <pool>", "pacer pool", "default")
    .option("--trace-id <id>", "trace id for ledger rows", "")
    .option(
      "--ledger-spool <file>",
      "file keeping ledger rows NATS has not acked at stop (default: one per run, cell and attempt in the temp folder)",
    )
    .option("--stop-timeout-seconds <s>", "on SIGTERM, stop within this many seconds", "10")
    .action(async (flags: ShimFlags) => {
      const attempt = positiveInt("--attempt", flags.attempt);
      const stopMs = positiveInt("--stop-timeout-seconds", flags.stopTimeoutSeconds) * 1_000;
      const settings = loadSettings("shim");
      const log = createLogger({ name: "shim", level: settings.log.level });
      const key = settings.shim.key;
      let nc: NatsConnection | undefined;
      if (settings.shim.useNats) {
        nc = await connectNats(settings.nats, { name: `shim-${flags.run}-${flags.cell}` });
      } else {
        process.stderr.write("NATS_URL is not set: ledger rows go to stderr only\n");
      }
      const shim = await startShim({
        upstream: flags.upstream,
        run: flags.run,
        cell: flags.cell,
        attempt,
        providerKey: key,
        port: positiveInt("--port", flags.port ?? "0"),
        host: flags.host ?? "127.0.0.1",
        budgetNanoUsd: flags.budgetUsd === undefined ? null : budgetFlagNano(flags.budgetUsd),
        maxTurns: flags.maxTurns === undefined ? null : positiveInt("--max-turns", flags.maxTurns),
        pool: flags.pool ?? "default",
        traceId: flags.traceId ?? "",
        logger: log,
        ledgerSpool: flags.ledgerSpool ?? defaultSpool(flags.run, flags.cell, attempt),
        ...(nc
          ? { nc }
          : { onLedgerRow: (row) => process.stderr.write(`${redactSecrets(JSON.stringify(row), [key])}\n`) }),
      });
      shim.onCapReached((ev) => process.stderr.write(`cap reached: ${ev.reason}\n`));
      process.stdout.write(`listening on 127.0.0.1:${shim.port}\n`);
      await new Promise<void>((resolve) => {
        const stop = () => {
          shim
            .close(stopMs)
            .then(async () => {
              // A server that went away leaves the client reconnecting: a drain that cannot finish is cut short.
              if (nc)
                await Promise.race([
                  nc.drain().catch(() => undefined),
                  sleep(1_000, undefined, { ref: false }),
                ]);
              if (nc && !nc.isClosed()) await nc.close().catch(() => undefined);
              process.stdout.write(`${JSON.stringify(shim.totals())}\n`);
            })
            .then(resolve, resolve);
        };
        process.once("SIGTERM", stop);
        process.once("SIGINT", stop);
      });
    });
}
