import { JobRefEnv } from "../../actors/dispatcher/backends/types.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";

/** What a harness task is told: which attempt of which cell of which run. Everything else it fetches. */
export interface TaskRef {
  run: string;
  cell: string;
  attempt: number;
}

/** The job reference from flags, falling back to the JobRefEnv variables every launch backend sets. */
export function readTaskRef(
  flags: { run?: string | undefined; cell?: string | undefined; attempt?: string | undefined },
  env: NodeJS.ProcessEnv = process.env,
): TaskRef {
  const run = flags.run ?? env[JobRefEnv.run];
  const cell = flags.cell ?? env[JobRefEnv.cell];
  const attemptText = flags.attempt ?? env[JobRefEnv.attempt] ?? "";
  const missing = [
    !run && `--run or ${JobRefEnv.run}`,
    !cell && `--cell or ${JobRefEnv.cell}`,
    attemptText === "" && `--attempt or ${JobRefEnv.attempt}`,
  ].filter((m): m is string => typeof m === "string");
  if (missing.length > 0)
    throw new EvalfleetError(ErrorCode.InvalidConfig, `no job reference: set ${missing.join(", ")}`);
  const attempt = Number(attemptText);
  if (!Number.isInteger(attempt) || attempt < 0)
    throw new EvalfleetError(
      ErrorCode.InvalidConfig,
      `attempt '${attemptText}' is not a non-negative integer`,
    );
  return { run: run as string, cell: cell as string, attempt };
}
