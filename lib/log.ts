import { type Logger, pino } from "pino";
import { ownSecrets, redactSecrets, redactValue } from "../protocol/redact.js";

export type { Logger };

/**
 * The structured logger every component receives. Every line is scrubbed of secrets as it is written — message,
 * fields, child bindings and errors alike — so a key that reaches an error message never reaches a log file.
 * This process's own keys (its settings' secret values, registered when config/ loads them: ownSecrets) are
 * redacted verbatim, whatever their shape. Fields are shaped first so logging never throws (circular values) and
 * errors keep their message and stack. The level comes from the caller (its role's `log.level` setting).
 */
export function createLogger(
  opts: { name: string; level?: string; destination?: NodeJS.WritableStream } = { name: "evalfleet" },
): Logger {
  const level = opts.level ?? "info";
  const target = opts.destination ?? process.stderr;
  const scrubbing = { write: (line: string) => target.write(redactSecrets(line, ownSecrets())) };
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
