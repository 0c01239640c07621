import {
  type AttemptResult,
  type CellWork,
  type GradeJob,
  type GradeResult,
  type JudgeJob,
  MessageTypes,
  type Verdict,
} from "../../protocol/messages.js";
import {
  type AttemptClass,
  classifyAttempt,
  GRADE_INFRA_ERROR_CLASS,
  isInfraErrorClass,
  retriesOf,
} from "../../protocol/retry.js";
import type { AttemptResultRow, CellStatus } from "../../store/results.js";
import type { GradeUpdate, VerdictUpdate } from "../../store/writer.js";

/*
 * Pure mapping from messages to rows and jobs: what the results-writer lands and enqueues, testable without NATS
 * or a database.
 */

/** sha256 of the empty string: a patch with this hash is empty, whatever its status says. */
const EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/** What the attempt needs next: a grade (swe, multi_phase), a verdict (open_ended), or nothing. */
export type Scoring = "grade" | "judge" | null;

/**
 * A patch exists that someone should score. The retry classes say which outcomes are gradable (PATCH_READY and
 * the cap outcomes); an empty or missing patch never reaches the grader. Open-ended work is judged instead, from
 * its patch or trajectory. Without the cell's record (no task id) no job can be built.
 */
export function scoringOf(r: AttemptResult, cls: AttemptClass, work: CellWork | null): Scoring {
  if (!work) return null;
  const hasPatch =
    (r.patchRef !== null || r.patch !== null) && r.patchHash !== null && r.patchHash !== EMPTY_SHA256;
  // Open-ended work is judged from its trajectory, so an attempt that ended normally is judged even without a patch.
  if (work.track === "open_ended")
    return cls.final && cls.cellStatus === "completed" && (hasPatch || r.trajectoryRef !== null)
      ? "judge"
      : null;
  if (!cls.gradable) return null;
  return hasPatch ? "grade" : null;
}

/** Cost mode stored on the row: the cell's all-or-nothing exemption; unknown stays NULL, which is billable. */
function costModeOf(work: CellWork | null): "platform" | "subscription" | null {
  if (!work) return null;
  return work.exempt ? "subscription" : "platform";
}

/**
 * The run_results row of one attempt. Tokens, calls and cost are left NULL here: they are recomputed from the
 * ledger in the same transaction (the harness's own claim is kept in harness_metadata for reconciliation).
 */
export function attemptRow(
  r: AttemptResult,
  work: CellWork | null,
  cls: AttemptClass,
  scoring: Scoring,
  base = baseOf(work),
): AttemptResultRow {
  let errorClass = cls.errorClass;
  // A gradable outcome whose patch is missing or empty is scored now: it failed, and says why.
  if (cls.gradable && scoring === null)
    errorClass = cls.errorClass === "pending_grade" ? "empty_patch" : errorClass;
  return {
    runName: r.run,
    cellId: r.cellId,
    attempt: r.attempt,
    harness: work?.harness ?? null,
    model: work?.model ?? null,
    taskId: work?.taskId ?? null,
    track: work?.track ?? null,
    repeat: work?.repeat ?? null,
    reviewModel: work?.reviewModel ?? null,
    traceId: work?.traceId ?? null,
    exitClass: cls.exitClass,
    // success is partial credit from the grade; an attempt that will not be scored has none, 0. A retrying
    // attempt is not an outcome yet, and one the environment ended is not the model's: no score either.
    success: scoring !== null || !cls.final || isInfraErrorClass(cls.errorClass) ? null : 0,
    errorClass,
    errorMessage: r.errorMessage,
    latencyMs: r.latencyMs,
    timeToFirstAttemptMs: r.timeToFirstAttemptMs,
    numToolCalls: r.numToolCalls,
    harnessMetadata: {
      harness: work?.harness ?? null,
      model: work?.model ?? null,
      review_model: work?.reviewModel ?? null,
      exit_code: r.exitCode,
      started_at: r.startedAt,
      finished_at: r.finishedAt,
      reported_usage: r.usage,
      harness_reported_cost_nano_usd: r.harnessReportedCostNanoUsd,
      sandbox: r.sandbox ?? null,
      phases: r.phases.map((p) => ({
        name: p.name,
        trace_id: p.traceId,
        model: p.model,
        model_role: p.modelRole,
        duration_ms: p.durationMs,
        exit_code: p.exitCode,
        timed_out: p.timedOut,
      })),
    },
    harnessStdout: r.stdout,
    harnessStderr: r.stderr,
    timestamp: r.finishedAt,
    // retries within the cell's submission, not the attempt number (which goes on across a resume)
    retryCount: retriesOf(r.attempt, base),
    costMode: costModeOf(work),
    status: r.status,
    patchHash: r.patchHash,
    patchRef: r.patchRef,
    // The seed's `diff` column: the patch itself, durable in the database after the run's blobs are pruned.
    diff: r.patch,
    trajectoryRef: r.trajectoryRef,
    // PENDING marks an enqueued grade/judge job until its result lands (and lets a redelivery re-enqueue it).
    gradeStatus: scoring === null ? null : "PENDING",
  };
}

/** run_state for an attempt, per the shared retry classes: final outcomes complete or fail the cell. */
export function cellStatusOf(
  r: AttemptResult,
  cls: AttemptClass,
): { status: CellStatus; error: string | null } {
  if (!cls.final) return { status: "running", error: null };
  if (cls.cellStatus === "failed")
    return {
      status: "failed",
      error: r.errorMessage ? `${cls.errorClass}: ${r.errorMessage}` : cls.errorClass,
    };
  return { status: "completed", error: null };
}

/**
 * The attempt's class under its run's timeout_policy (carried on the cell's work record), its retries counted from
 * `base`, the first attempt of its submission (the dispatcher's claim says; default: the work record's).
 */
export function classify(r: AttemptResult, work: CellWork | null = null, base = baseOf(work)): AttemptClass {
  return classifyAttempt(r.status, retriesOf(r.attempt, base), { timeoutPolicy: work?.timeoutPolicy });
}

/** The first attempt of the cell's submission as its work record says (a resumed cell's starts past 0). */
function baseOf(work: CellWork | null): number {
  return work?.firstAttempt ?? 0;
}

export function gradeJobOf(r: AttemptResult, work: CellWork): GradeJob {
  return {
    type: MessageTypes.gradeJob,
    run: r.run,
    cellId: r.cellId,
    attempt: r.attempt,
    taskId: work.taskId,
    patchRef: r.patchRef ?? "",
    patchHash: r.patchHash ?? "",
    patch: r.patch,
  };
}

export function judgeJobOf(r: AttemptResult, work: CellWork): JudgeJob {
  return {
    type: MessageTypes.judgeJob,
    run: r.run,
    cellId: r.cellId,
    attempt: r.attempt,
    taskId: work.taskId,
    trajectoryRef: r.trajectoryRef,
    patchRef: r.patchRef,
    patch: r.patch,
  };
}

interface SuccessFailure {
  success?: unknown[];
  failure?: unknown[];
}

/** The one instance entry of an official report.json (`{ "<instance_id>": {…} }`). */
function instanceEntry(report: Record<string, unknown>): Record<string, unknown> | null {
  const first = Object.values(report)[0];
  return first !== null && typeof first === "object" ? (first as Record<string, unknown>) : null;
}

/**
 * Partial credit: success is the fraction of the expected tests (FAIL_TO_PASS + PASS_TO_PASS) that pass in the
 * report; when the report lists none (a local task, a patch that did not apply) it is 1 if resolved, else 0.
 */
export function successOf(g: GradeResult): number {
  const ts = instanceEntry(g.report)?.tests_status as Record<string, SuccessFailure> | undefined;
  const lists = [ts?.FAIL_TO_PASS, ts?.PASS_TO_PASS];
  const passed = lists.reduce((n, l) => n + (l?.success?.length ?? 0), 0);
  const total = lists.reduce((n, l) => n + (l?.success?.length ?? 0) + (l?.failure?.length ?? 0), 0);
  if (total === 0) return g.resolved ? 1 : 0;
  return passed / total;
}

function gradeErrorClass(g: GradeResult): string {
  if (g.resolved) return "success";
  const entry = instanceEntry(g.report);
  if (entry?.patch_successfully_applied === false) return "patch_apply_failed";
  const ts = entry?.tests_status as Record<string, SuccessFailure> | undefined;
  const f2p = ts?.FAIL_TO_PASS;
  // The target tests pass but tests that passed before now fail: the fix overfits.
  if (f2p && (f2p.success?.length ?? 0) > 0 && (f2p.failure?.length ?? 0) === 0) {
    if ((ts?.PASS_TO_PASS?.failure?.length ?? 0) > 0) return "overfit";
  }
  return g.status === "PARTIAL" ? "partial" : "tests_failed";
}

function isoOrNow(at: string): string {
  const t = Date.parse(at);
  return Number.isNaN(t) ? new Date().toISOString() : new Date(t).toISOString();
}

/**
 * A grade as row columns. Resolved moves exit_class to `pass`. INFRA_FAILURE is not the model's fail: the row
 * stays, grade_status says INFRA_FAILURE, and exit_class becomes retryable_kill (an infrastructure stop) with no
 * resolved / success, so it never counts in a resolve rate's numerator or denominator.
 */
export function gradeUpdateOf(g: GradeResult): GradeUpdate {
  const base = {
    runName: g.run,
    cellId: g.cellId,
    attempt: g.attempt,
    gradeStatus: g.status,
    report: g.report,
    gradedAt: isoOrNow(g.gradedAt),
    error: g.error,
  };
  if (g.status === "INFRA_FAILURE")
    return {
      ...base,
      resolved: null,
      exitClass: "retryable_kill",
      success: null,
      errorClass: GRADE_INFRA_ERROR_CLASS,
    };
  return {
    ...base,
    resolved: g.resolved,
    exitClass: g.resolved ? "pass" : "fail",
    success: successOf(g),
    errorClass: gradeErrorClass(g),
  };
}

export function verdictUpdateOf(v: Verdict): VerdictUpdate {
  return {
    runName: v.run,
    cellId: v.cellId,
    attempt: v.attempt,
    score: v.score,
    verdict: {
      score: v.score,
      rationale: v.rationale,
      judge_model: v.judgeModel,
      cost_nano_usd: v.costNanoUsd,
      judged_at: v.judgedAt,
    },
  };
}
