import type { GradeResult, Verdict } from "../../protocol/messages.js";
import { applyGrades, applyVerdicts, lockCells } from "../../store/writer.js";
import { cellKey, type WriterContext } from "./context.js";
import { gradeUpdateOf, verdictUpdateOf } from "./rows.js";

/**
 * Land grade results on their attempts' rows. One result per attempt is kept from a batch, a real grade before an
 * INFRA_FAILURE (a grade of an attempt that is no longer the cell's row changes nothing). Returns rows changed.
 */
export async function landGrades(ctx: WriterContext, grades: readonly GradeResult[]): Promise<number> {
  const best = new Map<string, GradeResult>();
  for (const g of grades) {
    const k = `${cellKey(g.run, g.cellId)}\u0000${g.attempt}`;
    const prev = best.get(k);
    if (!prev || prev.status === "INFRA_FAILURE") best.set(k, g);
  }
  const updates = [...best.values()].map(gradeUpdateOf);
  const changed = await ctx.db.transaction(async (tx) => {
    await lockCells(tx, updates);
    return await applyGrades(tx, updates);
  });
  await ctx.afterCommit?.("grades");
  for (const g of grades) ctx.progress.markDirty(g.run);
  return changed.length;
}

/** Land judge verdicts on their attempts' rows (the last verdict of a batch per attempt wins). */
export async function landVerdicts(ctx: WriterContext, verdicts: readonly Verdict[]): Promise<number> {
  const last = new Map(verdicts.map((v) => [`${cellKey(v.run, v.cellId)}\u0000${v.attempt}`, v]));
  const updates = [...last.values()].map(verdictUpdateOf);
  const changed = await ctx.db.transaction(async (tx) => {
    await lockCells(tx, updates);
    return await applyVerdicts(tx, updates);
  });
  await ctx.afterCommit?.("verdicts");
  for (const v of verdicts) ctx.progress.markDirty(v.run);
  return changed.length;
}
