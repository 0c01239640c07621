/** The contract between the grader-supervisor and the places a patch can be graded. */

import type { EvalReport, GradingInstance, ResolvedStatus } from "../../../grading/index.js";
import { ownSecrets, redactSecrets } from "../../../protocol/redact.js";

export interface GradeJob {
  /** Needs version, base_commit and test_patch to build the eval script. */
  instance: GradingInstance;
  /** The model's patch; null means the prediction had none. */
  patch: string | null;
  /**
   * An empty (or null) patch: "skip" records it unresolved without running, as the official harness does
   * (empty_patch_ids); "run" executes the tests anyway, which gold validation needs for its empty-patch check.
   */
  emptyPatch?: "skip" | "run";
  /** docker: the official per-instance image pinned by digest. */
  image?: { name: string; digest: string };
  /** local: a disposable checkout at base_commit (left in its post-eval state, like the container). */
  checkoutDir?: string;
  /** local: the task's own test command; defaults to the official one for the repo/version. */
  testCmd?: string;
  /** Parser by log format for repositories outside the official map (see PARSERS_BY_FORMAT). */
  logFormat?: string;
  /** Seconds the eval script may run; default 1,800 as in the official harness. */
  timeoutS?: number;
}

/** Failures of the environment, not the model: retried, recorded, never scored. */
export type InfraFailureKind = "image_pull" | "container_start" | "out_of_disk" | "timeout" | "runtime";

export interface InfraFailure {
  kind: InfraFailureKind;
  message: string;
}

/** Why a patch was scored unresolved without a report, as the official harness does. */
export type NotGradedReason =
  /** All of the apply fallback chain failed: the harness raises EvaluationError, no report.json. */
  | "patch_apply_failed"
  /** Empty or missing patch, skipped like the harness's empty_patch_ids. */
  | "empty_patch"
  /** The official parser itself crashes on this log: the harness records an error, no report. */
  | "harness_error";

export type GradeOutcome =
  | {
      kind: "graded";
      resolved: boolean;
      status: ResolvedStatus;
      /** report.json, byte-identical to the official one when written with pyJsonDumps. */
      report: EvalReport;
      /** test_output.txt. */
      testOutput: string;
      /** true when served from the results cache. */
      cached?: boolean;
    }
  | { kind: "not_graded"; resolved: false; reason: NotGradedReason; detail: string; cached?: boolean }
  | { kind: "infra_failure"; failure: InfraFailure; attempts: number };

export interface GradeBackend {
  readonly name: string;
  grade(job: GradeJob, signal: AbortSignal): Promise<GradeOutcome>;
}

/**
 * The outcome with the text it carries redacted: the test output and apply log come from the harness's patched
 * code, and the outcome is cached in PostgreSQL, stored in the object store and published. Grading has already
 * read the full log by now.
 */
export function redactOutcome(o: GradeOutcome): GradeOutcome {
  const own = ownSecrets();
  if (o.kind === "graded") return { ...o, testOutput: redactSecrets(o.testOutput, own) };
  if (o.kind === "not_graded") return { ...o, detail: redactSecrets(o.detail, own) };
  return { ...o, failure: { ...o.failure, message: redactSecrets(o.failure.message, own) } };
}

export function infraFailure(kind: InfraFailureKind, message: string): GradeOutcome {
  return { kind: "infra_failure", failure: { kind, message }, attempts: 1 };
}

/** Out-of-disk shows up in many places; spotting it turns a confusing failure into a retryable one. */
export function mentionsOutOfDisk(text: string): boolean {
  return /no space left on device|ENOSPC|disk quota exceeded/i.test(text);
}
