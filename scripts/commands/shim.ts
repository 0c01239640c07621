import type { Command } from "commander";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { createLogger } from "../../protocol/log.js";
import { redactSecrets } from "../../protocol/redact.js";
import { startShim } from "../../shim/proxy/index.js";

interface ShimFlags {
  port: string;
  host: string;
  upstream: string;
  run: string;
  cell: string;
  attempt: string;
  budgetUsd?: string;
  maxTurns?: string;
  providerKeyEnv: string;
  pool?: string;
  traceId?: string;
}

/** "1.25" USD → 1_250_000_000n nano-USD, exactly (no float on the way). */
export function usdToNano(usd: string): bigint {
  const m = /^(\d+)(?:\.(\d{1,9}))?$/.exec(usd.trim());
  if (!m)
    throw new EvalfleetError(
      ErrorCode.InvalidConfig,
      `--budget-usd '${usd}' is not a decimal with at most 9 places`,
    );
  return BigInt(m[1]!) * 1_000_000_000n + BigInt((m[2] ?? "").padEnd(9, "0") || "0");
}

function positiveInt(name: string, v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0)
    throw new EvalfleetError(ErrorCode.InvalidConfig, `${name} '${v}' is not a non-negative integer`);
  return n;
}

/**
 * `evalfleet shim`: the local proxy shim standalone (tests, operators). Ledger rows and progress go to NATS_URL;
 * the run's key is read from the environment variable --provider-key-env names, never from a flag.
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
    .option(
      "--provider-key-env <name>",
      "environment variable holding the run's provider key",
      "EVALFLEET_RUN_KEY",
    )
    .option("--pool <pool>", "pacer pool", "default")
    .option("--trace-id <id>", "trace id for ledger rows", "")
    .action(async (flags: ShimFlags) => {
      const log = createLogger({ name: "shim" });
      const key = process.env[flags.providerKeyEnv];
      if (!key) {
        throw new EvalfleetError(
          ErrorCode.InvalidConfig,
          `environment variable ${flags.providerKeyEnv} (the run's key) is not set`,
        );
      }
      let nc: Awaited<ReturnType<typeof import("@nats-io/transport-node").connect>> | undefined;
      if (process.env.NATS_URL) {
        const { connect } = await import("@nats-io/transport-node");
        nc = await connect({
          servers: process.env.NATS_URL,
          name: `shim-${flags.run}-${flags.cell}`,
          maxReconnectAttempts: -1,
        });
      } else {
        process.stderr.write("NATS_URL is not set: ledger rows go to stderr only\n");
      }
      const shim = await startShim({
        upstream: flags.upstream,
        run: flags.run,
        cell: flags.cell,
        attempt: positiveInt("--attempt", flags.attempt),
        providerKey: key,
        port: positiveInt("--port", flags.port),
        host: flags.host,
        budgetNanoUsd: flags.budgetUsd === undefined ? null : usdToNano(flags.budgetUsd),
        maxTurns: flags.maxTurns === undefined ? null : positiveInt("--max-turns", flags.maxTurns),
        pool: flags.pool ?? "default",
        traceId: flags.traceId ?? "",
        logger: log,
        ...(nc
          ? { nc }
          : { onLedgerRow: (row) => process.stderr.write(`${redactSecrets(JSON.stringify(row), [key])}\n`) }),
      });
      shim.onCapReached((ev) => process.stderr.write(`cap reached: ${ev.reason}\n`));
      process.stdout.write(`listening on 127.0.0.1:${shim.port}\n`);
      await new Promise<void>((resolve) => {
        const stop = () => {
          shim
            .close()
            .then(async () => {
              await nc?.drain();
              process.stdout.write(`${JSON.stringify(shim.totals())}\n`);
            })
            .then(resolve, resolve);
        };
        process.once("SIGTERM", stop);
        process.once("SIGINT", stop);
      });
    });
}
