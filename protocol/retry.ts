import type { TimeoutPolicy } from "./config.js";
import type { AttemptStatus } from "./messages.js";

/**
 * The seed's retry classes, shared by the dispatcher (which decides to relaunch) and the results-writer (which
 * lands the row): a timeout is a RetryableError, retried after 2 s, 4 s, 8 s; after MAX_RETRIES retries the cell
 * is `retryable_kill` with error_class `retry_exhausted`; any other error is `non_retryable_kill` at once.
 *
 * Infrastructure is kept apart from the model: an attempt the environment ended (INFRA_FAILURE, or infrastructure
 * retries exhausted) is `retryable_kill` with error_class `infrastructure` and no score, so it never counts in a
 * resolved rate's numerator or denominator (see isInfraErrorClass).
 */
export const MAX_RETRIES = 3;
export const RETRY_DELAYS_MS = [2_000, 4_000, 8_000] as const;

export type ExitClass = "pass" | "fail" | "retryable_kill" | "non_retryable_kill";

/** error_class of an attempt the environment ended (its harness never ran, or ran without a provider). */
export const INFRA_ERROR_CLASS = "infrastructure";
/** error_class of an attempt whose grading failed on the environment after the grader's retries. */
export const GRADE_INFRA_ERROR_CLASS = "grade_infra_failure";

/** Whether a row's error_class is an infrastructure failure: counted apart, never the model's. */
export function isInfraErrorClass(errorClass: string | null | undefined): boolean {
  return errorClass === INFRA_ERROR_CLASS || errorClass === GRADE_INFRA_ERROR_CLASS;
}

/** What an attempt's status means for its cell. */
export interface AttemptClass {
  /** relaunch the cell with attempt + 1 after `retryDelayMs` */
  retry: boolean;
  retryDelayMs: number;
  /** the cell is finished (its run_state leaves `running`) */
  final: boolean;
  /** run_state status once final */
  cellStatus: "completed" | "failed" | "running";
  /** exit_class before grading; a graded patch moves `fail` to `pass` when resolved */
  exitClass: ExitClass;
  errorClass: string;
  /** a patch exists that the grader should see */
  gradable: boolean;
}

export interface ClassifyOptions {
  /** the run's timeout_policy (absent: retry, the seed's rule) */
  timeoutPolicy?: TimeoutPolicy | undefined;
}

/**
 * How many retries an attempt is into its cell's current submission: `attempt` less the submission's first attempt
 * (`base`: the dispatcher's claim records it; a resumed cell starts one past the highest attempt the database knows,
 * CellWork.firstAttempt). Attempt numbers go on across a resume; retries start again. The one rule the dispatcher
 * (relaunch or not) and the results-writer (the row's class and its retry_count) both count by.
 */
export function retriesOf(attempt: number, base: number): number {
  return Math.max(0, attempt - base);
}

/**
 * Classify an attempt. `retries` is 0 for the first try of the cell's submission (`retriesOf`). Timeouts (unless the run grades them) and infrastructure
 * stops that never let the harness run are retryable; HARNESS_ERROR is not; INFRA_FAILURE is final and unscored.
 * Cap outcomes are normal endings: the patch that exists is graded.
 */
export function classifyAttempt(
  status: AttemptStatus | "INFRA_RETRYABLE",
  retries: number,
  opts: ClassifyOptions = {},
): AttemptClass {
  const base = { retry: false, retryDelayMs: 0, final: true, gradable: false };
  switch (status) {
    case "PATCH_READY":
      return {
        ...base,
        cellStatus: "completed",
        exitClass: "fail",
        errorClass: "pending_grade",
        gradable: true,
      };
    case "BUDGET_EXCEEDED":
      return {
        ...base,
        cellStatus: "completed",
        exitClass: "fail",
        errorClass: "budget_exceeded",
        gradable: true,
      };
    case "MAX_TURNS_EXCEEDED":
      return {
        ...base,
        cellStatus: "completed",
        exitClass: "fail",
        errorClass: "max_turns_exceeded",
        gradable: true,
      };
    case "EMPTY_PATCH":
      return { ...base, cellStatus: "completed", exitClass: "fail", errorClass: "empty_patch" };
    case "HARNESS_ERROR":
      return { ...base, cellStatus: "failed", exitClass: "non_retryable_kill", errorClass: "harness_error" };
    case "INFRA_FAILURE":
      return { ...base, cellStatus: "failed", exitClass: "retryable_kill", errorClass: INFRA_ERROR_CLASS };
    case "TIMEOUT":
      // timeout_policy: grade — the patch the harness left is graded like a cap outcome's.
      if (opts.timeoutPolicy === "grade")
        return { ...base, cellStatus: "completed", exitClass: "fail", errorClass: "timeout", gradable: true };
      return retryOrExhaust(retries, "timeout", "retry_exhausted");
    case "INFRA_RETRYABLE":
      return retryOrExhaust(retries, "infrastructure", INFRA_ERROR_CLASS);
  }
}

function retryOrExhaust(retries: number, errorClass: string, exhausted: string): AttemptClass {
  if (retries < MAX_RETRIES)
    return {
      retry: true,
      retryDelayMs: RETRY_DELAYS_MS[retries] ?? 8_000,
      final: false,
      cellStatus: "running",
      exitClass: "retryable_kill",
      errorClass,
      gradable: false,
    };
  return {
    retry: false,
    retryDelayMs: 0,
    final: true,
    cellStatus: "failed",
    exitClass: "retryable_kill",
    errorClass: exhausted,
    gradable: false,
  };
}
