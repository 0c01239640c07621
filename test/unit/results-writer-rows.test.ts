import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  attemptRow,
  cellStatusOf,
  classify,
  gradeUpdateOf,
  scoringOf,
  successOf,
} from "../../actors/results-writer/rows.js";
import {
  type AttemptResult,
  type AttemptStatus,
  type CellWork,
  emptyUsage,
  type GradeResult,
  MessageTypes,
} from "../../protocol/messages.js";

const work: CellWork = {
  type: MessageTypes.cellWork,
  run: "r",
  cellId: "c",
  pool: "h__m",
  harness: "h",
  model: "m",
  reviewModel: null,
  taskId: "t",
  track: "swe",
  repeat: 0,
  traceId: "c",
  exempt: false,
  costMode: "platform",
};

function result(status: AttemptStatus, attempt = 0, patch: string | null = "abc"): AttemptResult {
  return {
    type: MessageTypes.attemptResult,
    run: "r",
    cellId: "c",
    attempt,
    status,
    exitCode: 0,
    usage: emptyUsage(),
    numToolCalls: 0,
    patchHash: patch,
    patchRef: patch === null ? null : "ref",
    patch: null,
    trajectoryRef: null,
    stdout: "",
    stderr: "",
    errorMessage: null,
    harnessReportedCostNanoUsd: null,
    startedAt: "2026-01-01T00:00:00Z",
    finishedAt: "2026-01-01T00:00:01Z",
    latencyMs: 1000,
    timeToFirstAttemptMs: null,
    phases: [],
  };
}

const scoring = (r: AttemptResult, w: CellWork | null = work) => scoringOf(r, classify(r), w);

describe("results-writer rows", () => {
  it("grades only attempts with a non-empty patch; judges open-ended work", () => {
    assert.equal(scoring(result("PATCH_READY")), "grade");
    assert.equal(scoring(result("BUDGET_EXCEEDED")), "grade");
    assert.equal(scoring(result("MAX_TURNS_EXCEEDED")), "grade");
    assert.equal(scoring(result("BUDGET_EXCEEDED", 0, null)), null);
    assert.equal(scoring(result("EMPTY_PATCH", 0, null)), null);
    assert.equal(scoring(result("HARNESS_ERROR")), null);
    assert.equal(scoring(result("TIMEOUT")), null);
    const emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    assert.equal(scoring(result("PATCH_READY", 0, emptyHash)), null);
    assert.equal(scoring(result("PATCH_READY"), { ...work, track: "open_ended" }), "judge");
    const openEnded = { ...work, track: "open_ended" as const };
    const withTrajectory = { ...result("EMPTY_PATCH", 0, null), trajectoryRef: "traj" };
    assert.equal(
      scoring(withTrajectory, openEnded),
      "judge",
      "open-ended work is judged from its trajectory",
    );
    assert.equal(scoring(result("EMPTY_PATCH", 0, null), openEnded), null, "nothing to judge");
    assert.equal(
      scoring({ ...result("HARNESS_ERROR"), trajectoryRef: "traj" }, openEnded),
      null,
      "a crash is not judged",
    );
    assert.equal(scoring(result("PATCH_READY"), null), null, "no task id without the cell record");
  });

  it("maps outcomes to rows and run_state per the shared retry classes", () => {
    const ready = attemptRow(result("PATCH_READY"), work, classify(result("PATCH_READY")), "grade");
    assert.equal(ready.gradeStatus, "PENDING");
    assert.equal(ready.success, null);
    assert.equal(ready.exitClass, "fail");
    assert.equal(ready.costMode, "platform");
    assert.equal(ready.totalCostNanoUsd, undefined, "money comes from the ledger");
    const empty = attemptRow(result("EMPTY_PATCH", 0, null), work, classify(result("EMPTY_PATCH")), null);
    assert.equal(empty.success, 0);
    assert.equal(empty.gradeStatus, null);
    assert.equal(
      attemptRow(result("PATCH_READY"), { ...work, exempt: true }, classify(result("PATCH_READY")), "grade")
        .costMode,
      "subscription",
    );
    assert.equal(
      attemptRow(result("PATCH_READY"), null, classify(result("PATCH_READY")), null).costMode,
      null,
    );

    const t0 = result("TIMEOUT", 0);
    assert.deepEqual(cellStatusOf(t0, classify(t0)), { status: "running", error: null });
    const t3 = result("TIMEOUT", 3);
    assert.deepEqual(cellStatusOf(t3, classify(t3)), { status: "failed", error: "retry_exhausted" });
    const he = { ...result("HARNESS_ERROR"), errorMessage: "boom" };
    assert.deepEqual(cellStatusOf(he, classify(he)), { status: "failed", error: "harness_error: boom" });
  });

  const grade = (status: GradeResult["status"], tests?: [number, number, number, number]): GradeResult => ({
    type: MessageTypes.gradeResult,
    run: "r",
    cellId: "c",
    attempt: 0,
    status,
    resolved: status === "FULL",
    report: tests
      ? {
          i: {
            patch_successfully_applied: true,
            tests_status: {
              FAIL_TO_PASS: { success: Array(tests[0]).fill("x"), failure: Array(tests[1]).fill("x") },
              PASS_TO_PASS: { success: Array(tests[2]).fill("x"), failure: Array(tests[3]).fill("x") },
            },
          },
        }
      : {},
    imageDigest: null,
    graderVersion: "v",
    cached: false,
    error: null,
    gradedAt: "not a time",
  });

  it("scores grades: partial credit, pass when resolved, infrastructure failures not the model's", () => {
    assert.equal(successOf(grade("PARTIAL", [1, 1, 3, 1])), 4 / 6);
    assert.equal(successOf(grade("FULL")), 1);
    assert.equal(successOf(grade("NO")), 0);
    const full = gradeUpdateOf(grade("FULL", [2, 0, 2, 0]));
    assert.equal(full.exitClass, "pass");
    assert.equal(full.errorClass, "success");
    assert.ok(!Number.isNaN(Date.parse(full.gradedAt)), "a bad timestamp becomes now");
    assert.equal(gradeUpdateOf(grade("NO", [2, 0, 1, 1])).errorClass, "overfit");
    assert.equal(gradeUpdateOf(grade("NO", [0, 2, 2, 0])).errorClass, "tests_failed");
    const infra = gradeUpdateOf(grade("INFRA_FAILURE"));
    assert.equal(infra.gradeStatus, "INFRA_FAILURE");
    assert.notEqual(infra.exitClass, "fail");
    assert.equal(infra.success, null);
    assert.equal(infra.resolved, null);
  });
});
