import { countModelCall, Metrics } from "../../lib/metrics.js";
import { ATTEMPT_STATUSES, type AttemptStatus, type LedgerCall } from "../../protocol/messages.js";
import { classifyAttempt, retriesOf } from "../../protocol/retry.js";
import { insertLedgerCalls, type LedgerCallRow } from "../../store/results.js";
import { lockCells, refreshAttemptTotals, refreshPhaseTotals, voidSuperseded } from "../../store/writer.js";
import { reportRefusals } from "../runtime/security.js";
import { cellFinalOf } from "./attempts.js";
import { cellKey, type WriterContext } from "./context.js";
import type { CellFinal } from "./progress.js";

export function ledgerRow(c: LedgerCall): LedgerCallRow {
  return {
    callId: c.callId,
    runName: c.run,
    cellId: c.cellId,
    attempt: c.attempt,
    traceId: c.traceId,
    model: c.model,
    alias: c.alias,
    pool: c.pool,
    provider: c.provider,
    status: c.status,
    httpStatus: c.httpStatus,
    inputTokens: c.inputTokens,
    outputTokens: c.outputTokens,
    cacheReadTokens: c.cacheReadTokens,
    cacheWriteTokens: c.cacheWriteTokens,
    reasoningTokens: c.reasoningTokens,
    costNanoUsd: c.costNanoUsd,
    priceVersion: c.priceVersion,
    latencyMs: c.latencyMs,
    ttfbMs: c.ttfbMs,
    pacerWaitMs: c.pacerWaitMs,
    retries: c.retries,
    clampedMaxTokens: c.clampedMaxTokens,
    estimated: c.estimated,
    costMode: c.costMode,
    startedAt: c.startedAt,
  };
}

/**
 * Land a batch of ledger calls: a call_id already present is skipped, so redelivery changes nothing. In the same
 * transaction, a call of a newer attempt voids the cell's older calls, and the attempt rows already landed get
 * their totals recomputed — so a row converges whether its calls arrive before or after it. Returns how many
 * calls were new.
 */
export async function landLedger(ctx: WriterContext, calls: readonly LedgerCall[]): Promise<number> {
  const { claimed, unclaimed } = await ctx.claims.split([
    ...new Map(calls.map((c) => [c.callId, c])).values(),
  ]);
  // A call billed to an attempt nobody launched would move money between cells or void a real attempt's calls.
  await reportRefusals(
    ctx,
    unclaimed.map((c) => ({
      run: c.run,
      cellId: c.cellId,
      attempt: c.attempt,
      check: "unclaimed_ledger_call",
      ref: c.callId,
      message: `refused ledger call ${c.callId} for ${c.cellId} attempt ${c.attempt}: the dispatcher never claimed that attempt`,
    })),
  );
  for (const c of unclaimed) ctx.progress.markDirty(c.run);
  const unique = claimed;
  if (unique.length === 0) return 0;
  const keys = unique.map((c) => ({ runName: c.run, cellId: c.cellId }));
  // A single-phase cell's trace id is its cell id; only calls of a phase trace can change a phase row.
  const phased = unique.some((c) => c.traceId !== c.cellId);
  const t0 = performance.now();
  const { inserted, totals } = await ctx.db.transaction(async (tx) => {
    await lockCells(tx, keys);
    const inserted = await insertLedgerCalls(tx, unique.map(ledgerRow));
    // Nothing new: this batch's effects were committed by an earlier delivery.
    if (inserted === 0) return { inserted, totals: [] };
    await voidSuperseded(tx, keys);
    const totals = await refreshAttemptTotals(tx, keys);
    if (phased) await refreshPhaseTotals(tx, keys);
    return { inserted, totals };
  });
  await ctx.afterCommit?.("ledger");
  countLanded(unique, inserted);
  // A call that lands after its attempt's final result changes the cell's figures: refresh its key too.
  const finals: CellFinal[] = [];
  const ended = totals.filter((t): t is typeof t & { status: AttemptStatus } => isStatus(t.status));
  // Classified as the attempt's own result is: under its run's timeout_policy, retries from its submission's first.
  const works =
    ended.length === 0
      ? new Map()
      : await ctx.cells.getMany(ended.map((t) => ({ run: t.runName, cellId: t.cellId })));
  for (const t of ended) {
    const work = works.get(cellKey(t.runName, t.cellId)) ?? null;
    const base = (await ctx.claims.base(t.runName, t.cellId, t.attempt)) ?? work?.firstAttempt ?? 0;
    const cls = classifyAttempt(t.status, retriesOf(t.attempt, base), { timeoutPolicy: work?.timeoutPolicy });
    if (cls.final)
      finals.push(cellFinalOf(t, cls.cellStatus === "failed" ? "failed" : "completed", cls.errorClass));
  }
  await ctx.progress.putCells(finals);
  for (const c of unique) ctx.progress.markDirty(c.run);
  ctx.log.debug(
    { n: calls.length, inserted, refreshed: totals.length, ms: performance.now() - t0 },
    "ledger batch",
  );
  return inserted;
}

/** /metrics: the calls this batch landed (a batch only partly new cannot say which were: it is counted apart). */
function countLanded(calls: readonly LedgerCall[], inserted: number): void {
  if (inserted === 0) return;
  if (inserted !== calls.length) {
    Metrics.ledgerBatchesUncounted.inc();
    return;
  }
  for (const c of calls) {
    countModelCall("ledger", {
      model: c.model,
      status: c.status,
      httpStatus: c.httpStatus,
      costNanoUsd: c.costNanoUsd,
      tokens: c,
    });
    if (c.pacerWaitMs > 0) {
      Metrics.pacerWaitMs.inc({ pool: c.pool }, c.pacerWaitMs);
      Metrics.pacerWaitedCalls.inc({ pool: c.pool });
    }
  }
}

function isStatus(s: string | null): s is AttemptStatus {
  return s !== null && (ATTEMPT_STATUSES as readonly string[]).includes(s);
}
