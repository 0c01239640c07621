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

/** Normalise anything thrown at a boundary into an EvalfleetError. */
export function toEvalfleetError(err: unknown): EvalfleetError {
  if (err instanceof EvalfleetError) return err;
  if (err instanceof Error) return new EvalfleetError(ErrorCode.Internal, err.message, { cause: err });
  return new EvalfleetError(ErrorCode.Internal, String(err));
}

/** Render issues as lines a person can act on: `path: reason`. */
export function formatIssues(issues: readonly Issue[]): string {
  return issues.map((i) => `  - ${i.path || "(root)"}: ${i.reason}`).join("\n");
}
