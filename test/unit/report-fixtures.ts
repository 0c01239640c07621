import type { AttemptRow, LedgerGroup, ReportInput } from "../../report/types.js";

/** Rows for the report unit tests. */

export function attempt(p: Partial<AttemptRow> & Pick<AttemptRow, "cellId">): AttemptRow {
  return {
    harness: "h1",
    model: "m1",
    taskId: "t1",
    repeat: 0,
    attempt: 0,
    status: "PATCH_READY",
    gradeStatus: "FULL",
    resolved: true,
    success: 1,
    errorClass: "success",
    latencyMs: 1000,
    ...p,
  };
}

export function ledger(p: Partial<LedgerGroup>): LedgerGroup {
  return {
    harness: "h1",
    model: "m1",
    calls: 10,
    voidedCalls: 2,
    totalNanoUsd: 4_000_000_000,
    billableNanoUsd: 3_000_000_000,
    voidedNanoUsd: 500_000_000,
    tokens: { input: 100, output: 50, cacheRead: 10, cacheWrite: 5, reasoning: 1 },
    pacerWaitMs: 250,
    medianCallLatencyMs: 800,
    ...p,
  };
}

export function sampleInput(): ReportInput {
  const attempts: AttemptRow[] = [
    // h1/m1: task t1 resolved twice of 2, task t2 once of 2; one pending grade (not scored)
    attempt({ cellId: "a1", taskId: "t1", repeat: 0 }),
    attempt({ cellId: "a2", taskId: "t1", repeat: 1, attempt: 2, latencyMs: 3000 }),
    attempt({
      cellId: "a3",
      taskId: "t2",
      repeat: 0,
      resolved: false,
      success: 0,
      gradeStatus: "NO",
      errorClass: "tests_failed",
    }),
    attempt({ cellId: "a4", taskId: "t2", repeat: 1, latencyMs: 2000 }),
    attempt({
      cellId: "a5",
      taskId: "t3",
      gradeStatus: "PENDING",
      resolved: null,
      success: null,
      errorClass: "pending_grade",
    }),
    // h2/m1: harness error (scored 0) and an infra failure (not scored)
    attempt({
      cellId: "b1",
      harness: "h2",
      status: "HARNESS_ERROR",
      gradeStatus: null,
      resolved: null,
      success: 0,
      errorClass: "harness_error",
    }),
    attempt({
      cellId: "b2",
      harness: "h2",
      gradeStatus: "INFRA_FAILURE",
      resolved: null,
      success: null,
      errorClass: "grade_infra_failure",
    }),
  ];
  return {
    run: "r1",
    attempts,
    ledger: [
      ledger({}),
      ledger({
        harness: "h2",
        totalNanoUsd: 1_000_000_000,
        billableNanoUsd: 0,
        voidedNanoUsd: 0,
        calls: 3,
        voidedCalls: 0,
      }),
    ],
    phases: [
      {
        harness: "h1",
        model: "m1",
        phase: "implement",
        phaseModel: "m1",
        rows: 2,
        costNanoUsd: 7,
        inputTokens: 1,
        outputTokens: 2,
      },
    ],
    spend: [
      { atMs: 2000, totalNanoUsd: 3, billableNanoUsd: 1 },
      { atMs: 1000, totalNanoUsd: 2, billableNanoUsd: 2 },
    ],
    generatedAt: "2026-01-01T00:00:00.000Z",
  };
}
