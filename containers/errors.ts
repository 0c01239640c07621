/** Typed failures of the container runtime: one class, a stable `failure` kind, retryable when trying again may help. */
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";

/**
 * What went wrong, as the callers decide on it: an environment failure (every kind but `not_found` and `invalid`)
 * is never the fault of the code run inside the container.
 */
export type ContainerFailure =
  /** No Docker API answers at the endpoint. */
  | "unavailable"
  /** The image, container or registry object does not exist. */
  | "not_found"
  /** The request itself is wrong (a bad reference, a conflicting name, an option the daemon refuses). */
  | "invalid"
  | "pull"
  | "push"
  | "build"
  | "import"
  | "create"
  | "start"
  | "out_of_disk"
  | "timeout"
  /** Anything else the daemon answered with an error. */
  | "runtime";

const RETRYABLE: ReadonlySet<ContainerFailure> = new Set([
  "unavailable",
  "pull",
  "push",
  "out_of_disk",
  "timeout",
  "runtime",
  "start",
]);

export class ContainerError extends EvalfleetError {
  readonly failure: ContainerFailure;
  /** The HTTP status the Engine API answered with, when it answered. */
  readonly status: number | undefined;

  constructor(failure: ContainerFailure, message: string, opts: { status?: number; cause?: unknown } = {}) {
    super(codeOf(failure), message, { retryable: RETRYABLE.has(failure), cause: opts.cause });
    this.name = "ContainerError";
    this.failure = failure;
    this.status = opts.status;
  }
}

function codeOf(failure: ContainerFailure): ErrorCode {
  if (failure === "unavailable") return ErrorCode.Unavailable;
  if (failure === "not_found") return ErrorCode.NotFound;
  if (failure === "invalid") return ErrorCode.InvalidConfig;
  if (failure === "timeout") return ErrorCode.Timeout;
  return ErrorCode.Internal;
}

/** Out of disk shows up in many shapes; naming it makes a confusing failure a retryable one. */
export function mentionsOutOfDisk(text: string): boolean {
  return /no space left on device|ENOSPC|disk quota exceeded/i.test(text);
}

interface ModemError {
  statusCode?: number;
  json?: { message?: string } | string | null;
  reason?: string;
  message?: string;
  code?: string;
}

/** The daemon's own words from a docker-modem error (its JSON body), else the error's message. */
export function daemonMessage(err: unknown): string {
  const e = err as ModemError;
  if (e?.json && typeof e.json === "object" && typeof e.json.message === "string") return e.json.message;
  if (typeof e?.json === "string" && e.json.trim() !== "") return e.json.trim();
  return e?.message ?? String(err);
}

const CONNECT_CODES = new Set(["ENOENT", "ECONNREFUSED", "EACCES", "ECONNRESET", "EPIPE", "ETIMEDOUT"]);

/**
 * Turn anything docker-modem threw into a ContainerError. `during` names the step for the message and the failure
 * kind a daemon error maps to; a socket that is not there is `unavailable`, a 404 `not_found`, full disks
 * `out_of_disk`.
 */
export function toContainerError(err: unknown, during: ContainerFailure, what: string): ContainerError {
  if (err instanceof ContainerError) return err;
  const e = err as ModemError;
  const message = daemonMessage(err);
  const status = typeof e?.statusCode === "number" ? e.statusCode : undefined;
  const opts = status === undefined ? { cause: err } : { status, cause: err };
  if (e?.code && CONNECT_CODES.has(e.code)) {
    return new ContainerError("unavailable", `${what}: the Docker API did not answer (${e.code})`, opts);
  }
  if (mentionsOutOfDisk(message)) return new ContainerError("out_of_disk", `${what}: ${message}`, opts);
  if (status === 404) return new ContainerError("not_found", `${what}: ${message}`, opts);
  if (status === 400 || status === 409) {
    // A pull or push the registry refused is still that step's failure, not a bad request of ours.
    const kind = during === "pull" || during === "push" ? during : "invalid";
    return new ContainerError(kind, `${what}: ${message}`, opts);
  }
  return new ContainerError(during, `${what}: ${message}`, opts);
}
