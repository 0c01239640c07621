import { createHash } from "node:crypto";
import { encodeJson } from "../../protocol/decode.js";
import { MsgIds } from "../../protocol/ids.js";
import {
  type AttemptResult,
  type CellWork,
  GradeJobSchema,
  JudgeJobSchema,
  patchText,
} from "../../protocol/messages.js";
import type { AttemptClass } from "../../protocol/retry.js";
import { BlobNames, Subjects } from "../../protocol/subjects.js";
import { insertPhaseResults, type PhaseResultRow, upsertAttemptResults } from "../../store/results.js";
import {
  type AttemptTotals,
  lockCells,
  readHeads,
  refreshAttemptTotals,
  refreshPhaseTotals,
  setCellStatuses,
  voidSuperseded,
} from "../../store/writer.js";
import { foreignBlobRef, type Refusal, reportRefusals } from "../runtime/security.js";
import { cellKey, type WriterContext } from "./context.js";
import type { CellFinal } from "./progress.js";
import {
  attemptRow,
  cellStatusOf,
  classify,
  gradeJobOf,
  judgeJobOf,
  type Scoring,
  scoringOf,
} from "./rows.js";

interface Planned {
  r: AttemptResult;
  work: CellWork | null;
  cls: AttemptClass;
  /** the first attempt of the cell's submission: retries count from it */
  base: number;
  scoring: Scoring;
  /** a patch too big to travel inline, read back from its blob so the row holds it for good */
  diff?: string | null;
}

export interface AttemptsOutcome {
  landed: number;
  /** Grade and judge jobs published (including re-publishes after a redelivery). */
  enqueued: number;
}

/**
 * Land a batch of attempt results in one transaction: an attempt row replaces the cell's row only when it is newer
 * than the stored one (an older or already-landed attempt changes nothing), its phases, its totals from the ledger
 * (voiding the ledger rows of the attempts it supersedes) and run_state. After the commit, scoring jobs go out
 * with a message id per attempt; a redelivered result whose job may not have gone out (grade_status still
 * PENDING) publishes it again and JetStream drops the duplicate.
 */
export async function landAttempts(
  ctx: WriterContext,
  batch: readonly AttemptResult[],
): Promise<AttemptsOutcome> {
  const results = await refuseForged(ctx, batch);
  const latest = new Map<string, AttemptResult>();
  for (const r of results) {
    const k = cellKey(r.run, r.cellId);
    const prev = latest.get(k);
    if (!prev || r.attempt > prev.attempt) latest.set(k, r);
  }
  const items = [...latest.values()];
  const t0 = performance.now();
  const works = await ctx.cells.getMany(items.map((r) => ({ run: r.run, cellId: r.cellId })));
  const plan: Planned[] = await Promise.all(
    items.map(async (r) => {
      const work = works.get(cellKey(r.run, r.cellId)) ?? null;
      // Retries count from the first attempt of the cell's submission, as the dispatcher's claim records it.
      const base = (await ctx.claims.base(r.run, r.cellId, r.attempt)) ?? work?.firstAttempt ?? 0;
      const cls = classify(r, work, base);
      const diff = r.patch === null && r.patchRef !== null ? await blobPatch(ctx, r, r.patchRef) : undefined;
      return { r, work, cls, base, scoring: scoringOf(r, cls, work), diff };
    }),
  );

  const t1 = performance.now();
  const { landed, resend, totals } = await ctx.db.transaction(async (tx) => {
    const keys = plan.map((p) => ({ runName: p.r.run, cellId: p.r.cellId }));
    await lockCells(tx, keys);
    const heads = await readHeads(tx, keys);
    const landed: Planned[] = [];
    const resend: Planned[] = [];
    for (const p of plan) {
      const head = heads.get(cellKey(p.r.run, p.r.cellId));
      if (!head || p.r.attempt > head.attempt) landed.push(p);
      else if (head.attempt === p.r.attempt && head.gradeStatus === "PENDING" && p.scoring) resend.push(p);
    }
    if (landed.length === 0) return { landed, resend, totals: [] as AttemptTotals[] };
    const landedKeys = landed.map((p) => ({ runName: p.r.run, cellId: p.r.cellId }));
    await upsertAttemptResults(
      tx,
      landed.map((p) => ({
        ...attemptRow(p.r, p.work, p.cls, p.scoring, p.base),
        ...(p.diff !== undefined ? { diff: p.diff } : {}),
      })),
    );
    const phases = landed.flatMap((p) => phaseRows(p.r));
    await insertPhaseResults(tx, phases);
    // A first attempt supersedes nothing; a later one voids its predecessors' calls (the ledger path catches
    // calls that arrive later still).
    await voidSuperseded(
      tx,
      landed.filter((p) => p.r.attempt > 0).map((p) => ({ runName: p.r.run, cellId: p.r.cellId })),
    );
    const totals = await refreshAttemptTotals(tx, landedKeys);
    if (phases.length > 0)
      await refreshPhaseTotals(
        tx,
        phases.map((x) => ({ runName: x.runName, cellId: x.cellId })),
      );
    await setCellStatuses(
      tx,
      landed.map((p) => ({
        runName: p.r.run,
        cellId: p.r.cellId,
        at: p.r.finishedAt,
        ...cellStatusOf(p.r, p.cls),
      })),
    );
    return { landed, resend, totals };
  });
  await ctx.afterCommit?.("attempts");
  const t2 = performance.now();

  const jobs = [...landed, ...resend].filter((p) => p.scoring !== null && p.work !== null);
  const byCell = new Map(totals.map((t) => [cellKey(t.runName, t.cellId), t]));
  const finals: CellFinal[] = [];
  for (const p of landed) {
    const t = byCell.get(cellKey(p.r.run, p.r.cellId));
    if (!p.cls.final || !t) continue;
    finals.push(cellFinalOf(t, cellStatusOf(p.r, p.cls).status, p.cls.errorClass));
  }
  // Jobs and cell keys are independent: both go out at once, and the batch is acked when both are done.
  await Promise.all([...jobs.map((p) => publishJob(ctx, p)), ctx.progress.putCells(finals)]);
  for (const p of plan) ctx.progress.markDirty(p.r.run);
  ctx.log.debug(
    {
      n: results.length,
      landed: landed.length,
      jobs: jobs.length,
      recordsMs: Math.round(t1 - t0),
      txMs: Math.round(t2 - t1),
      afterMs: Math.round(performance.now() - t2),
    },
    "attempt batch",
  );
  return { landed: landed.length, enqueued: jobs.length };
}

/**
 * Nothing forged lands: a result of an attempt the dispatcher never claimed (a higher attempt number than any
 * launched, another cell's) is refused whole; a claimed attempt's result that names a blob outside the attempt's
 * own prefix (another run's resolved patch) lands as the harness's error, with no patch and nothing to grade.
 * Either is a security event.
 */
async function refuseForged(ctx: WriterContext, batch: readonly AttemptResult[]): Promise<AttemptResult[]> {
  const { claimed, unclaimed } = await ctx.claims.split(batch);
  const refusals: Refusal[] = unclaimed.map((r) => ({
    run: r.run,
    cellId: r.cellId,
    attempt: r.attempt,
    check: "unclaimed_attempt",
    ref: "result",
    message: `refused a result for ${r.cellId} attempt ${r.attempt}: the dispatcher never claimed that attempt (forged, or from a task nobody launched)`,
  }));
  const kept = claimed.map((r) => {
    const bad = foreignBlobRef(r, [r.patchRef, r.trajectoryRef]);
    if (bad === null) {
      // An inline patch is described by its own hash, whatever the task said.
      if (r.patch === null) return r;
      const hash = createHash("sha256").update(r.patch).digest("hex");
      return hash === r.patchHash ? r : { ...r, patchHash: hash };
    }
    const message = `refused blob ${JSON.stringify(bad)} in the result of ${r.cellId} attempt ${r.attempt}: not one of the attempt's own blobs (${BlobNames.attemptPrefix(r.run, r.cellId, r.attempt)}…)`;
    refusals.push({
      run: r.run,
      cellId: r.cellId,
      attempt: r.attempt,
      check: "foreign_blob_ref",
      ref: bad,
      message,
    });
    return {
      ...r,
      status: "HARNESS_ERROR" as const,
      patchRef: null,
      patch: null,
      patchHash: null,
      trajectoryRef: null,
      errorMessage: r.errorMessage ? `${message}; ${r.errorMessage}` : message,
    };
  });
  await reportRefusals(ctx, refusals);
  for (const r of refusals) ctx.progress.markDirty(r.run);
  return kept;
}

/**
 * A patch that went to the object store (too big to travel inline), as text for the row's `diff` column: the blob
 * is pruned with the run, the row is not. Null when the blob is gone or is not UTF-8 text (the row keeps its ref).
 */
async function blobPatch(ctx: WriterContext, r: AttemptResult, ref: string): Promise<string | null> {
  try {
    const bytes = await ctx.plane.blobs.getBlob(ref);
    return bytes === null ? null : patchText(bytes);
  } catch (err) {
    ctx.log.warn(
      { run: r.run, cell: r.cellId, attempt: r.attempt, ref, err: String(err) },
      "could not copy the patch blob into its row",
    );
    return null;
  }
}

async function publishJob(ctx: WriterContext, p: Planned): Promise<void> {
  const { r, work } = p;
  if (!work) return;
  if (p.scoring === "grade") {
    await ctx.plane.js.publish(
      Subjects.gradeJobs.one(r.run),
      encodeJson(GradeJobSchema, gradeJobOf(r, work), "grade job"),
      { msgID: MsgIds.grade(r.run, r.cellId, r.attempt) },
    );
  } else if (p.scoring === "judge") {
    await ctx.plane.js.publish(
      Subjects.judgeJobs.one(r.run),
      encodeJson(JudgeJobSchema, judgeJobOf(r, work), "judge job"),
      { msgID: MsgIds.judgeJob(r.run, r.cellId, r.attempt) },
    );
  }
}

/** Phase rows start from the task's own figures; refreshPhaseTotals replaces them from the ledger's calls. */
function phaseRows(r: AttemptResult): PhaseResultRow[] {
  return r.phases.map((ph) => ({
    runName: r.run,
    cellId: r.cellId,
    attempt: r.attempt,
    phaseName: ph.name,
    traceId: ph.traceId,
    model: ph.model,
    modelRole: ph.modelRole,
    exitCode: ph.exitCode,
    durationMs: ph.durationMs,
    timedOut: ph.timedOut,
    inputTokens: ph.usage.inputTokens,
    outputTokens: ph.usage.outputTokens,
    totalCostNanoUsd: ph.usage.costNanoUsd,
    numApiCalls: ph.usage.calls,
    error: ph.error,
    stdout: ph.stdout,
    stderr: ph.stderr,
    timestamp: r.finishedAt,
  }));
}

export function cellFinalOf(t: AttemptTotals, status: CellFinal["status"], detail: string): CellFinal {
  return {
    run: t.runName,
    cellId: t.cellId,
    attempt: t.attempt,
    status,
    detail,
    usage: {
      inputTokens: t.inputTokens,
      outputTokens: t.outputTokens,
      cacheReadTokens: t.cacheReadTokens,
      cacheWriteTokens: t.cacheWriteTokens,
      reasoningTokens: t.reasoningTokens,
      costNanoUsd: t.totalCostNanoUsd,
      calls: t.calls,
    },
  };
}
