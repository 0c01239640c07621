import type { AttemptStatus } from "./messages.js";

/**
 * The seed's retry classes, shared by the dispatcher (which decides to relaunch) and the results-writer (which
 * lands the row): a timeout is a RetryableError, retried after 2 s, 4 s, 8 s; after MAX_RETRIES retries the cell
 * is `retryable_kill` with error_class `retry_exhausted`; any other error is `non_retryable_kill` at once.
 */
export const MAX_RETRIES = 3;
export const RETRY_DELAYS_MS = [2_000, 4_000, 8_000] as const;

export type ExitClass = "pass" | "fail" | "retryable_kill" | "non_retryable_kill";

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

/**
 * Classify an attempt. `attempt` is 0 for the first try. Timeouts (and infrastructure stops that never let the
 * harness run) are retryable; HARNESS_ERROR is not. Cap outcomes are normal endings: the patch that exists is graded.
 */
export function classifyAttempt(status: AttemptStatus | "INFRA_RETRYABLE", attempt: number): AttemptClass {
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
    case "TIMEOUT":
    case "INFRA_RETRYABLE": {
      const errorClass = status === "TIMEOUT" ? "timeout" : "infrastructure";
      if (attempt < MAX_RETRIES)
        return {
          ...base,
          retry: true,
          retryDelayMs: RETRY_DELAYS_MS[attempt] ?? 8_000,
          final: false,
          cellStatus: "running",
          exitClass: "retryable_kill",
          errorClass,
        };
      return { ...base, cellStatus: "failed", exitClass: "retryable_kill", errorClass: "retry_exhausted" };
    }
  }
}
