import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { Db } from "../../store/db.js";
import {
  type AttemptResultRow,
  getAttemptResult,
  getBillableCost,
  getCellStatuses,
  getCompletedCells,
  getRunMetadata,
  getTotalCost,
  insertLedgerCalls,
  insertPendingCells,
  insertPhaseResults,
  type LedgerCallRow,
  ledgerTotals,
  saveRunMetadata,
  setCellStatus,
  upsertAttemptResults,
  voidLedgerForTrace,
} from "../../store/results.js";
import { type FreshDb, freshDb } from "../helpers/db.js";

const KIND = process.env.DATABASE_URL ? "postgres" : "pglite";

describe(`results store queries (${KIND})`, () => {
  let f: FreshDb;
  let db: Db;
  before(async () => {
    f = await freshDb("store-results");
    db = f.db;
  });
  after(async () => {
    await f?.cleanup();
  });

  test("run metadata is saved and refreshed idempotently", async () => {
    await saveRunMetadata(db, {
      runName: "r1",
      config: { a: 1 },
      version: "0.1.0",
      dockerImage: "img@sha256:x",
    });
    await saveRunMetadata(db, {
      runName: "r1",
      config: { a: 2 },
      version: "0.1.0",
      dockerImage: "img@sha256:x",
    });
    const m = await getRunMetadata(db, "r1");
    assert.deepEqual(m, {
      runName: "r1",
      configJson: '{"a":2}',
      version: "0.1.0",
      dockerImage: "img@sha256:x",
    });
  });

  test("20,000 pending cells in batched INSERTs; re-inserting is a no-op; progress is never reset", async (t) => {
    const cells = Array.from({ length: 20_000 }, (_, i) => `h__m__task-${i}__r0`);
    const t0 = performance.now();
    assert.equal(await insertPendingCells(db, "big", cells), 20_000);
    const ms = performance.now() - t0;
    t.diagnostic(`[${KIND}] insertPendingCells 20,000 cells: ${ms.toFixed(0)} ms`);
    await setCellStatus(db, "big", cells[7]!, "completed");
    const t1 = performance.now();
    assert.equal(
      await insertPendingCells(
        db,
        "big",
        cells.map((cellId) => ({ cellId })),
      ),
      0,
    );
    t.diagnostic(
      `[${KIND}] insertPendingCells 20,000 cells again (all present): ${(performance.now() - t1).toFixed(0)} ms`,
    );
    assert.deepEqual([...(await getCompletedCells(db, "big"))], [cells[7]]);
    assert.deepEqual(await getCellStatuses(db, "big"), { pending: 19_999, completed: 1 });
    assert.equal(await insertPendingCells(db, "big", []), 0);
  });

  test("cell status transitions; completed is never demoted", async () => {
    const at = new Date("2025-01-01T00:00:00Z");
    assert.equal(await setCellStatus(db, "s", "c1", "running", { at }), true);
    assert.equal(await setCellStatus(db, "s", "c1", "completed"), true);
    assert.equal(await setCellStatus(db, "s", "c1", "running"), false, "late redelivery must not reopen");
    assert.equal(await setCellStatus(db, "s", "c1", "failed", { error: "x" }), false);
    const r = await db.query<{ status: string; started_at: string; completed_at: string | null }>(
      "SELECT status, started_at, completed_at FROM run_state WHERE run_name = 's' AND cell_id = 'c1'",
    );
    assert.equal(r.rows[0]?.status, "completed");
    assert.equal(r.rows[0]?.started_at, at.toISOString());
    assert.ok(r.rows[0]?.completed_at);
    assert.deepEqual([...(await getCompletedCells(db, "s"))], ["c1"]);
    await setCellStatus(db, "s", "c2", "failed", {
      error: "Budget cap reached ($0.0123 remaining < $0.0500 estimated)",
    });
    await setCellStatus(db, "s", "c2", "running");
    const c2 = await db.query<{ status: string; error: string | null }>(
      "SELECT status, error FROM run_state WHERE run_name = 's' AND cell_id = 'c2'",
    );
    assert.deepEqual(c2.rows[0], { status: "running", error: null });
  });

  const base = (
    cellId: string,
    attempt: number,
    extra: Partial<AttemptResultRow> = {},
  ): AttemptResultRow => ({
    runName: "att",
    cellId,
    attempt,
    harness: "opencode",
    model: "claude-sonnet-5",
    taskId: "swe-bugfix-001",
    track: "swe",
    repeat: 0,
    ...extra,
  });

  test("attempt upserts: newer wins, older is ignored, same attempt merges, batches of thousands", async (t) => {
    assert.equal(
      await upsertAttemptResults(db, [
        base("c1", 1, {
          status: "PATCH_READY",
          totalCostNanoUsd: 1_500_000_000,
          harnessMetadata: { tier: 2 },
        }),
      ]),
      1,
    );
    // An older attempt arriving late changes nothing.
    assert.equal(
      await upsertAttemptResults(db, [base("c1", 0, { status: "TIMEOUT", totalCostNanoUsd: 9 })]),
      0,
    );
    let row = await getAttemptResult(db, "att", "c1");
    assert.equal(row?.status, "PATCH_READY");
    assert.equal(row?.totalCostNanoUsd, 1_500_000_000);
    assert.equal(row?.harnessMetadata, '{"tier":2}');
    // Same attempt, partial write (a grade): merges, keeps what was there.
    await upsertAttemptResults(db, [
      base("c1", 1, {
        gradeStatus: "FULL",
        resolved: true,
        gradeReport: { tests: [1, 2] },
        gradedAt: new Date(0),
      }),
    ]);
    row = await getAttemptResult(db, "att", "c1");
    assert.equal(row?.status, "PATCH_READY");
    assert.equal(row?.gradeStatus, "FULL");
    assert.equal(row?.resolved, true);
    assert.deepEqual(row?.gradeReport, { tests: [1, 2] });
    // A newer attempt replaces the row: the old grade does not survive onto a different patch.
    await upsertAttemptResults(db, [base("c1", 2, { status: "EMPTY_PATCH", totalCostNanoUsd: 3 })]);
    row = await getAttemptResult(db, "att", "c1");
    assert.equal(row?.attempt, 2);
    assert.equal(row?.status, "EMPTY_PATCH");
    assert.equal(row?.gradeStatus, null);
    assert.equal(row?.totalCostNanoUsd, 3);

    // Duplicates of one cell inside one call are applied in order.
    await upsertAttemptResults(db, [
      base("dup", 0, { status: "TIMEOUT" }),
      base("dup", 1, { status: "PATCH_READY" }),
    ]);
    assert.equal((await getAttemptResult(db, "att", "dup"))?.status, "PATCH_READY");

    // 3,000 rows x 44 columns: more than one statement's worth of parameters.
    const many = Array.from({ length: 3000 }, (_, i) =>
      base(`bulk-${i}`, 0, { totalCostNanoUsd: i, inputTokens: i * 10, costMode: "platform" }),
    );
    const t0 = performance.now();
    assert.equal(await upsertAttemptResults(db, many), 3000);
    t.diagnostic(`[${KIND}] upsertAttemptResults 3,000 rows: ${(performance.now() - t0).toFixed(0)} ms`);
    assert.equal(
      await upsertAttemptResults(db, many),
      3000,
      "same attempt re-applied: rows touched, values same",
    );
    const n = await db.query<{ n: number; s: string }>(
      "SELECT count(*) AS n, sum(total_cost)::text AS s FROM run_results WHERE cell_id LIKE 'bulk-%'",
    );
    assert.deepEqual(n.rows[0], { n: 3000, s: "0.004498500" });
  });

  test("phase results are idempotent per (run, cell, attempt, phase) and need their parent", async () => {
    const rows = [
      {
        runName: "att",
        cellId: "c1",
        attempt: 2,
        phaseName: "implement",
        totalCostNanoUsd: 10,
        timedOut: false,
      },
      { runName: "att", cellId: "c1", attempt: 2, phaseName: "review", totalCostNanoUsd: 20, timedOut: true },
    ];
    assert.equal(await insertPhaseResults(db, rows), 2);
    assert.equal(await insertPhaseResults(db, rows), 0);
    const r = await db.query<{ phase_name: string; timed_out: number; total_cost: string }>(
      "SELECT phase_name, timed_out, total_cost FROM phase_results WHERE run_name = 'att' ORDER BY id",
    );
    assert.deepEqual(r.rows, [
      { phase_name: "implement", timed_out: 0, total_cost: "0.000000010" },
      { phase_name: "review", timed_out: 1, total_cost: "0.000000020" },
    ]);
    await assert.rejects(
      insertPhaseResults(db, [{ runName: "nope", cellId: "c1", attempt: 0, phaseName: "implement" }]),
      (err: unknown) => (err as { code?: string }).code === "23503",
    );
  });

  test("billable cost: NULL cost_mode is billable, subscription is exempt, total counts everything", async () => {
    await upsertAttemptResults(db, [
      {
        runName: "bill",
        cellId: "platform",
        attempt: 0,
        costMode: "platform",
        totalCostNanoUsd: 1_000_000_001,
      },
      { runName: "bill", cellId: "null", attempt: 0, costMode: null, totalCostNanoUsd: 20 },
      { runName: "bill", cellId: "unknown", attempt: 0, totalCostNanoUsd: 300 },
      {
        runName: "bill",
        cellId: "sub",
        attempt: 0,
        costMode: "subscription",
        totalCostNanoUsd: 4_000_000_000,
      },
      { runName: "bill", cellId: "nocost", attempt: 0, costMode: "platform" },
      { runName: "other", cellId: "platform", attempt: 0, costMode: "platform", totalCostNanoUsd: 99 },
    ]);
    // A direct write that omits cost_mode also lands as billable.
    await db.query(
      "INSERT INTO run_results (run_name, cell_id, total_cost) VALUES ('bill', 'direct', 0.000000005)",
    );
    assert.equal(await getBillableCost(db, "bill"), 1_000_000_001 + 20 + 300 + 5);
    assert.equal(await getTotalCost(db, "bill"), 1_000_000_001 + 20 + 300 + 4_000_000_000 + 5);
    assert.equal(await getBillableCost(db, "no-such-run"), 0);
    assert.equal(await getTotalCost(db, "no-such-run"), 0);
  });

  const call = (
    callId: string,
    cellId: string,
    attempt: number,
    cost: number,
    traceId = cellId,
  ): LedgerCallRow => ({
    callId,
    runName: "led",
    cellId,
    attempt,
    traceId,
    model: "claude-sonnet-5",
    status: "ok",
    inputTokens: 100,
    cacheReadTokens: 1000,
    costNanoUsd: cost,
    startedAt: new Date(),
  });

  test("ledger: batched, call_id idempotent, voiding keeps rows and stops counting them", async (t) => {
    const A = "h__m__t__r1";
    const A10 = "h__m__t__r10";
    const rows = [
      call("k1", A, 0, 1_000, A),
      call("k2", A, 0, 2_000, `${A}__phase-implement`),
      call("k3", A10, 0, 40_000, A10),
      call("k4", A, 1, 8_000, A),
    ];
    assert.equal(await insertLedgerCalls(db, rows), 4);
    assert.equal(await insertLedgerCalls(db, [...rows, call("k5", A, 1, 16_000, A)]), 1);
    assert.deepEqual(await ledgerTotals(db, "led"), {
      nonVoidedNanoUsd: 67_000,
      allNanoUsd: 67_000,
      calls: 5,
      voidedCalls: 0,
    });
    // Attempt 1 of cell A started from scratch: attempt 0's calls for A (and only A, not r10) stop counting.
    assert.equal(await voidLedgerForTrace(db, "led", { traceIdPrefix: A }, 1), 2);
    assert.equal(await voidLedgerForTrace(db, "led", { traceIdPrefix: A }, 1), 0, "idempotent");
    assert.deepEqual(await ledgerTotals(db, "led"), {
      nonVoidedNanoUsd: 64_000,
      allNanoUsd: 67_000,
      calls: 5,
      voidedCalls: 2,
    });
    assert.equal(await voidLedgerForTrace(db, "led", { cellId: A10 }, 1), 1);
    const v = await db.query<{ call_id: string; voided: boolean; has_at: boolean }>(
      "SELECT call_id, voided, voided_at IS NOT NULL AS has_at FROM ledger_calls WHERE run_name = 'led' ORDER BY call_id",
    );
    assert.deepEqual(
      v.rows.map((r) => [r.call_id, r.voided, r.has_at]),
      [
        ["k1", true, true],
        ["k2", true, true],
        ["k3", true, true],
        ["k4", false, false],
        ["k5", false, false],
      ],
    );
    // Prefix characters are literal: LIKE wildcards in an id match nothing extra.
    assert.equal(await voidLedgerForTrace(db, "led", { traceIdPrefix: "h%" }, 9), 0);

    // Big batch: more rows than fit in one statement's parameters.
    const bulk = Array.from({ length: 5000 }, (_, i) => call(`bulk-${i}`, `cell-${i % 50}`, 0, 1));
    const t0 = performance.now();
    assert.equal(await insertLedgerCalls(db, bulk), 5000);
    t.diagnostic(`[${KIND}] insertLedgerCalls 5,000 rows: ${(performance.now() - t0).toFixed(0)} ms`);
    assert.equal(await insertLedgerCalls(db, bulk), 0);
    assert.equal((await ledgerTotals(db, "led")).calls, 5005);
  });
});
