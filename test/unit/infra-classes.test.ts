/**
 * Honest denominators, the pure parts: which attempt outcomes are the environment's (never scored), what the task
 * reports when the environment stopped it, how timeout_policy changes a TIMEOUT, and how the report counts them.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { classify } from "../../actors/results-writer/rows.js";
import { renderText } from "../../cli/commands/watch.js";
import { ContainerError } from "../../containers/errors.js";
import { LiveState, summarize } from "../../dashboard/live.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { type AttemptResult, type CellWork, emptyRunProgress } from "../../protocol/messages.js";
import { classifyAttempt, isInfraErrorClass } from "../../protocol/retry.js";
import { ProgressKeys } from "../../protocol/subjects.js";
import { buildReport } from "../../report/aggregate.js";
import type { AttemptRow } from "../../report/types.js";
import { emptyTotals } from "../../shim/index.js";
import { attemptStatus, isEnvironmentFailure, sumTotals } from "../../task/result.js";
import type { HarnessExit } from "../../task/supervise.js";

const exited = (exitCode: number): HarnessExit =>
  ({ exitCode, signal: null, durationMs: 10, stdout: "", stderr: "" }) as unknown as HarnessExit;

describe("retry classes", () => {
  it("INFRA_FAILURE is final, unscored and apart; infrastructure retries exhaust into the same class", () => {
    const c = classifyAttempt("INFRA_FAILURE", 0);
    assert.deepEqual(
      [c.final, c.gradable, c.exitClass, c.errorClass],
      [true, false, "retryable_kill", "infrastructure"],
    );
    assert.equal(classifyAttempt("INFRA_RETRYABLE", 0).retry, true);
    assert.equal(classifyAttempt("INFRA_RETRYABLE", 3).errorClass, "infrastructure");
    assert.ok(isInfraErrorClass("infrastructure") && isInfraErrorClass("grade_infra_failure"));
    assert.ok(!isInfraErrorClass("retry_exhausted") && !isInfraErrorClass("harness_error"));
  });

  it("timeout_policy: retry (the seed's rule, the default) or grade", () => {
    assert.equal(classifyAttempt("TIMEOUT", 0).retry, true);
    assert.equal(classifyAttempt("TIMEOUT", 3).errorClass, "retry_exhausted");
    const g = classifyAttempt("TIMEOUT", 0, { timeoutPolicy: "grade" });
    assert.deepEqual(
      [g.retry, g.final, g.gradable, g.cellStatus, g.errorClass],
      [false, true, true, "completed", "timeout"],
    );
    const r = { status: "TIMEOUT", attempt: 0 } as AttemptResult;
    assert.equal(classify(r, { timeoutPolicy: "grade" } as CellWork).gradable, true);
    assert.equal(classify(r, null).retry, true);
  });
});

describe("what the task reports when the environment stopped it", () => {
  it("a provider's spend limit or a harness that never started is INFRA_FAILURE", () => {
    assert.equal(
      attemptStatus("budget_exceeded", exited(0), null, 10, "provider_spend_limit"),
      "INFRA_FAILURE",
    );
    assert.equal(attemptStatus(null, null, null, 0, "never_started"), "INFRA_FAILURE");
    assert.equal(
      attemptStatus("budget_exceeded", exited(0), null, 10),
      "BUDGET_EXCEEDED",
      "the run's own cap",
    );
  });

  it("exhausted 429s: INFRA_FAILURE when nothing is left to grade, graded when the harness left a patch", () => {
    assert.equal(attemptStatus(null, exited(0), null, 0, "rate_limit_exhausted"), "INFRA_FAILURE");
    assert.equal(attemptStatus(null, exited(1), null, 0, "rate_limit_exhausted"), "INFRA_FAILURE");
    assert.equal(attemptStatus(null, exited(0), null, 42, "rate_limit_exhausted"), "PATCH_READY");
    assert.equal(attemptStatus(null, exited(0), null, 0), "EMPTY_PATCH");
  });

  it("the infrastructure stop survives adding up a multi-phase attempt's sessions", () => {
    const a = emptyTotals();
    const b = { ...emptyTotals(), infraStop: "rate_limit_exhausted" as const };
    assert.equal(sumTotals([a, b]).infraStop, "rate_limit_exhausted");
  });

  it("environment failures before a session are container, disk and retryable errors only", () => {
    assert.ok(isEnvironmentFailure(new ContainerError("pull", "pulling x")));
    assert.ok(isEnvironmentFailure(Object.assign(new Error("x"), { code: "ENOSPC" })));
    assert.ok(isEnvironmentFailure(new EvalfleetError(ErrorCode.Unavailable, "no docker")));
    assert.ok(!isEnvironmentFailure(new EvalfleetError(ErrorCode.InvalidConfig, "bad version")));
    assert.ok(!isEnvironmentFailure(new Error("boom")));
  });
});

describe("the report counts them apart", () => {
  const row = (cellId: string, over: Partial<AttemptRow>): AttemptRow => ({
    cellId,
    harness: "h",
    model: "m",
    taskId: cellId,
    repeat: 0,
    attempt: 0,
    status: "PATCH_READY",
    gradeStatus: null,
    resolved: null,
    success: null,
    errorClass: null,
    latencyMs: 1,
    ...over,
  });
  const attempts = [
    row("a", { gradeStatus: "FULL", resolved: true, success: 1, errorClass: "success" }),
    row("b", { gradeStatus: "NO", resolved: false, success: 0, errorClass: "tests_failed" }),
    row("c", { status: "INFRA_FAILURE", errorClass: "infrastructure" }),
    row("d", { gradeStatus: "INFRA_FAILURE", errorClass: "grade_infra_failure" }),
  ];
  const input = { run: "r", attempts, ledger: [], phases: [], spend: [] };

  it("apart (default): out of the resolved rate, with their own count", () => {
    const r = buildReport(input);
    assert.deepEqual([r.totals.scored, r.totals.resolved, r.totals.infraFailures], [2, 1, 2]);
    assert.equal(r.groups[0]?.resolvedRate, 0.5);
  });

  it("as_failures: scored as unresolved", () => {
    const r = buildReport({ ...input, runOptions: { infraFailures: "as_failures", unvalidated: false } });
    assert.deepEqual([r.totals.scored, r.totals.resolved, r.totals.infraFailures], [4, 1, 2]);
    assert.equal(r.groups[0]?.resolvedRate, 0.25);
  });
});

describe("watch and the dashboard show the count", () => {
  it("the progress key's infraFailures reach the live summary and watch's text", () => {
    const state = new LiveState();
    state.applyProgress({
      key: ProgressKeys.run("r"),
      operation: "PUT",
      value: new TextEncoder().encode(
        JSON.stringify(
          emptyRunProgress({
            run: "r",
            phase: "running",
            message: "",
            totalCells: 4,
            completed: 2,
            failed: 2,
            infraFailures: 2,
          }),
        ),
      ),
    });
    const s = summarize(state, "r");
    assert.equal(s?.infraFailures, 2);
    const text = renderText(s as NonNullable<typeof s>, { rate: null, etaMs: null });
    assert.match(text, /^infra +2 infrastructure failures · not the model's: out of the resolved rate$/m);
    assert.doesNotMatch(
      renderText({ ...(s as NonNullable<typeof s>), infraFailures: 0 }, { rate: null, etaMs: null }),
      /infrastructure failures/,
    );
  });
});
