import { type Logger, pino } from "pino";
import { redactSecrets } from "./redact.js";

export type { Logger };

/**
 * The structured logger every component receives. Secrets are scrubbed from messages before they are written,
 * so a key that reaches an error message never reaches a log file.
 */
export function createLogger(
  opts: { name: string; level?: string; destination?: NodeJS.WritableStream } = { name: "evalfleet" },
): Logger {
  const level = opts.level ?? process.env.EVALFLEET_LOG_LEVEL ?? process.env.LOG_LEVEL ?? "info";
  return pino(
    {
      name: opts.name,
      level,
      hooks: {
        logMethod(args, method) {
          const scrubbed = args.map((a) => (typeof a === "string" ? redactSecrets(a) : a)) as typeof args;
          method.apply(this, scrubbed);
        },
      },
      formatters: {
        log(obj) {
          return JSON.parse(redactSecrets(JSON.stringify(obj))) as Record<string, unknown>;
        },
      },
    },
    (opts.destination ?? process.stderr) as pino.DestinationStream,
  );
}

/** A logger that writes nothing (tests, library defaults). */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
