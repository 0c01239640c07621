import { type Logger, pino } from "pino";
import { redactSecrets, redactValue, secretsFromEnv } from "./redact.js";

export type { Logger };

/**
 * The structured logger every component receives. Every line is scrubbed of secrets as it is written — message,
 * fields, child bindings and errors alike — so a key that reaches an error message never reaches a log file.
 * This process's own keys (secretsFromEnv) are redacted verbatim, whatever their shape. Fields are shaped first
 * so logging never throws (circular values) and errors keep their message and stack.
 */
export function createLogger(
  opts: { name: string; level?: string; destination?: NodeJS.WritableStream } = { name: "evalfleet" },
): Logger {
  const level = opts.level ?? process.env.EVALFLEET_LOG_LEVEL ?? process.env.LOG_LEVEL ?? "info";
  const target = opts.destination ?? process.stderr;
  const own = secretsFromEnv();
  const scrubbing = { write: (line: string) => target.write(redactSecrets(line, own)) };
  return pino(
    {
      name: opts.name,
      level,
      serializers: { err: (e: unknown) => redactValue(e) },
      hooks: {
        logMethod(args, method) {
          // `log.warn(err)` takes its message from the error: the same as `log.warn({ err }, err.message)`.
          const [first, ...rest] = args as unknown[];
          const shaped =
            first instanceof Error ? [{ err: first }, ...(rest.length ? rest : [first.message])] : args;
          method.apply(this, shaped as typeof args);
        },
      },
      formatters: {
        log(obj) {
          return redactValue(obj) as Record<string, unknown>;
        },
      },
    },
    scrubbing,
  );
}

/** A logger that writes nothing (tests, library defaults). */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
