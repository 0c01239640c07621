/** Stable error codes. A code never changes meaning once released; add new ones at the end. */
export const ErrorCode = {
  InvalidConfig: "EF_INVALID_CONFIG",
  InvalidMessage: "EF_INVALID_MESSAGE",
  UnknownTask: "EF_UNKNOWN_TASK",
  MatrixInvalid: "EF_MATRIX_INVALID",
  PayloadTooLarge: "EF_PAYLOAD_TOO_LARGE",
  TopologyMismatch: "EF_TOPOLOGY_MISMATCH",
  ServerTooOld: "EF_SERVER_TOO_OLD",
  NotFound: "EF_NOT_FOUND",
  Conflict: "EF_CONFLICT",
  Timeout: "EF_TIMEOUT",
  Unavailable: "EF_UNAVAILABLE",
  BudgetExceeded: "EF_BUDGET_EXCEEDED",
  Unauthorized: "EF_UNAUTHORIZED",
  Forbidden: "EF_FORBIDDEN",
  Migration: "EF_MIGRATION",
  Internal: "EF_INTERNAL",
  /** a model neither the run config nor the pinned price data prices */
  UnknownPrice: "EF_UNKNOWN_PRICE",
  /** a request asks for something that cannot be priced before it is sent (n > 1, background, server tools) */
  Unpriceable: "EF_UNPRICEABLE_REQUEST",
  /** NATS refused a write because JetStream's storage (a stream's cap, or the server's store) is full */
  StorageFull: "EF_STORAGE_FULL",
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** One problem found while validating input: where it is and what is wrong with it. */
export interface Issue {
  path: string;
  reason: string;
}

/** The one error type evalfleet throws on purpose. `retryable` says whether trying again may help. */
export class EvalfleetError extends Error {
  readonly code: ErrorCode;
  readonly retryable: boolean;
  readonly issues: Issue[];

  constructor(
    code: ErrorCode,
    message: string,
    opts: { retryable?: boolean; issues?: Issue[]; cause?: unknown } = {},
  ) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = "EvalfleetError";
    this.code = code;
    this.retryable = opts.retryable ?? false;
    this.issues = opts.issues ?? [];
  }

  toJSON(): { code: ErrorCode; message: string; retryable: boolean; issues: Issue[] } {
    return { code: this.code, message: this.message, retryable: this.retryable, issues: this.issues };
  }
}

/** A failure that may succeed if tried again (timeouts, unavailable services). */
export class RetryableError extends EvalfleetError {
  constructor(code: ErrorCode, message: string, opts: { issues?: Issue[]; cause?: unknown } = {}) {
    super(code, message, { ...opts, retryable: true });
    this.name = "RetryableError";
  }
}

/** Input that can never be accepted; retrying it changes nothing. */
export class ValidationError extends EvalfleetError {
  constructor(code: ErrorCode, message: string, issues: Issue[]) {
    super(code, message, { issues, retryable: false });
    this.name = "ValidationError";
  }
}

/**
 * JetStream's answers for a write that found no room: 10023 insufficient resources (the server's store, or the
 * account's limit) and 10077 maximum bytes exceeded (a stream at its cap, which discards new). Read from the error's
 * code, the one place a server answer becomes a typed error here (protocol/ imports no NATS client).
 */
const STORAGE_FULL_CODES = new Set([10023, 10077]);

export function isStorageFull(err: unknown): boolean {
  if (err instanceof EvalfleetError) return err.code === ErrorCode.StorageFull;
  const e = err as { name?: unknown; code?: unknown } | null;
  return e?.name === "JetStreamApiError" && typeof e.code === "number" && STORAGE_FULL_CODES.has(e.code);
}

/** What a process says when JetStream has no room: nothing is lost, and what an operator can do. */
export function storageFullError(cause: unknown): RetryableError {
  return new RetryableError(
    ErrorCode.StorageFull,
    `JetStream storage is full (${cause instanceof Error ? cause.message : String(cause)}): nothing was written and nothing is lost; work waits and goes on when space returns. Free space on the NATS server's store, prune finished runs sooner (EVALFLEET_PRUNE_AFTER_HOURS), or raise the server's max_file_store / EVALFLEET_STREAM_MAX_BYTES.`,
    { cause },
  );
}

/** Normalise anything thrown at a boundary into an EvalfleetError. */
/** NATS client errors that say the server is away or slow, not that the request was wrong (by name: no import here). */
const TRANSIENT_NATS = new Set([
  "TimeoutError",
  "ClosedConnectionError",
  "DrainingConnectionError",
  "ConnectionError",
  "RequestError",
  "NoRespondersError",
]);

/** A NATS or JetStream failure that trying again later may get past (the server restarting, a leader election). */
export function isTransientNatsError(err: unknown): boolean {
  const e = err as { name?: unknown; message?: unknown; code?: unknown } | null;
  if (typeof e?.name !== "string") return false;
  if (TRANSIENT_NATS.has(e.name)) return true;
  const message = typeof e.message === "string" ? e.message : "";
  return (
    (e.name === "JetStreamStatusError" || e.name === "JetStreamError" || e.name === "JetStreamApiError") &&
    /timeout|timed out|no responders|not (ready|available)|no suitable peers|leader|connection (closed|lost)|disconnect/i.test(
      message,
    )
  );
}

export function toEvalfleetError(err: unknown): EvalfleetError {
  if (err instanceof EvalfleetError) return err;
  if (isStorageFull(err)) return storageFullError(err);
  if (isTransientNatsError(err))
    return new RetryableError(ErrorCode.Unavailable, `NATS unavailable: ${(err as Error).message}`, {
      cause: err,
    });
  if (err instanceof Error) return new EvalfleetError(ErrorCode.Internal, err.message, { cause: err });
  return new EvalfleetError(ErrorCode.Internal, String(err));
}

/** Render issues as lines a person can act on: `path: reason`. */
export function formatIssues(issues: readonly Issue[]): string {
  return issues.map((i) => `  - ${i.path || "(root)"}: ${i.reason}`).join("\n");
}
