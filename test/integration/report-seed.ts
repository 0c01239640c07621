import type { Db } from "../../store/db.js";
import {
  type AttemptResultRow,
  insertLedgerCalls,
  insertPendingCells,
  insertPhaseResults,
  type LedgerCallRow,
  saveRunMetadata,
  setCellStatus,
  upsertAttemptResults,
  voidLedgerForTrace,
} from "../../store/results.js";

/*
 * A small finished run with everything the report reads: two harnesses on one model (one budget-exempt), three
 * tasks × two repeats, a retried cell whose first attempt's calls are voided, a pending grade, an infra failure,
 * a harness error, a multi-phase cell, and ledger calls spread over ten minutes. Deterministic, so two databases
 * seeded with it hold the same rows.
 */

export const RUN = "report-run";
export const HARNESSES = ["h-alpha", "h-beta"] as const;
export const MODEL = "m-x";
export const TASKS = ["astropy__astropy-1", "django__django-2", "sympy__sympy-3"] as const;
const T0 = Date.parse("2026-01-01T10:00:00.000Z");

export const cellId = (h: string, t: string, r: number) => `${h}__${MODEL}__${t}__r${r}`;

export async function seedReportRun(db: Db): Promise<{ cells: string[] }> {
  await saveRunMetadata(db, { runName: RUN, config: { name: RUN, budget_usd: 5 }, version: "test" });
  const rows: AttemptResultRow[] = [];
  const calls: LedgerCallRow[] = [];
  const cells: string[] = [];
  let n = 0;
  for (const h of HARNESSES)
    for (const [ti, t] of TASKS.entries())
      for (const r of [0, 1]) {
        const id = cellId(h, t, r);
        cells.push(id);
        const retried = h === "h-alpha" && ti === 0 && r === 1;
        const attempt = retried ? 1 : 0;
        // h-alpha resolves t0 and t1 (not t1 r1); h-beta resolves t2 r0 only; special outcomes below
        let row: Partial<AttemptResultRow> = {
          status: "PATCH_READY",
          gradeStatus: "FULL",
          resolved: true,
          success: 1,
          exitClass: "pass",
          errorClass: "success",
        };
        if ((h === "h-alpha" && ti === 1 && r === 1) || (h === "h-beta" && !(ti === 2 && r === 0)))
          row = {
            ...row,
            gradeStatus: "NO",
            resolved: false,
            success: 0,
            exitClass: "fail",
            errorClass: "tests_failed",
          };
        if (h === "h-alpha" && ti === 2 && r === 0)
          row = {
            ...row,
            gradeStatus: "PENDING",
            resolved: null,
            success: null,
            errorClass: "pending_grade",
          };
        if (h === "h-alpha" && ti === 2 && r === 1)
          row = {
            ...row,
            gradeStatus: "INFRA_FAILURE",
            resolved: null,
            success: null,
            errorClass: "grade_infra_failure",
          };
        if (h === "h-beta" && ti === 0 && r === 1)
          row = {
            status: "HARNESS_ERROR",
            gradeStatus: null,
            resolved: null,
            success: 0,
            exitClass: "non_retryable_kill",
            errorClass: "harness_error",
          };
        rows.push({
          runName: RUN,
          cellId: id,
          attempt,
          harness: h,
          model: MODEL,
          taskId: t,
          track: ti === 1 && h === "h-beta" ? "multi_phase" : "swe",
          repeat: r,
          costMode: h === "h-beta" ? "subscription" : "platform",
          latencyMs: 10_000 + 1_000 * n,
          diff: `diff --git a/f${n} b/f${n}\n+fix ${id}\n`,
          ...row,
        });
        for (let a = 0; a <= attempt; a++)
          for (let k = 0; k < 3; k++) {
            n++;
            calls.push({
              callId: `${id}-a${a}-c${k}`,
              runName: RUN,
              cellId: id,
              attempt: a,
              traceId: id,
              model: MODEL,
              pool: `${h}__${MODEL}`,
              provider: "anthropic",
              status: "ok",
              inputTokens: 1000 + n,
              outputTokens: 100 + n,
              cacheReadTokens: 10 * k,
              cacheWriteTokens: k,
              reasoningTokens: n % 3,
              // odd amounts so a float anywhere would show
              costNanoUsd: 123_456_789 + 1_000_003 * n,
              latencyMs: 200 + 10 * n,
              pacerWaitMs: n % 5,
              costMode: h === "h-beta" ? "subscription" : "platform",
              startedAt: new Date(T0 + n * 9_000),
            });
          }
      }
  await insertPendingCells(db, RUN, cells);
  for (const c of cells) await setCellStatus(db, RUN, c, "completed");
  await upsertAttemptResults(db, rows);
  await insertLedgerCalls(db, calls);
  // created_at drives spend over time: spread the calls the way they happened.
  await db.query("UPDATE ledger_calls SET created_at = started_at WHERE run_name = $1", [RUN]);
  await voidLedgerForTrace(db, RUN, { cellId: cellId("h-alpha", TASKS[0], 1) }, 1);
  const mp = cellId("h-beta", TASKS[1], 0);
  await insertPhaseResults(db, [
    {
      runName: RUN,
      cellId: mp,
      attempt: 0,
      phaseName: "implement",
      traceId: `${mp}__phase-implement`,
      model: MODEL,
      totalCostNanoUsd: 300_000_000,
      inputTokens: 10,
      outputTokens: 5,
    },
    {
      runName: RUN,
      cellId: mp,
      attempt: 0,
      phaseName: "review",
      traceId: `${mp}__phase-review`,
      model: MODEL,
      totalCostNanoUsd: 111_111_111,
      inputTokens: 3,
      outputTokens: 2,
    },
  ]);
  return { cells };
}
