import type { ObjectStore } from "@nats-io/obj";
import { nanoToNumber, usdToNano } from "../protocol/money.js";
import type { Db } from "../store/db.js";
import { cellDetailRows } from "../store/detail.js";

/*
 * One attempt in detail, read on click: its run_results row, its ledger calls, its phases (PostgreSQL) and its
 * patch (object store; a large one is cut so the page stays responsive). Its trajectory is read step by step, whole
 * (dashboard/api.ts: /steps), not here.
 */

const PATCH_MAX = 200_000;

export interface CellDetail {
  run: string;
  cellId: string;
  row: Record<string, unknown> | null;
  ledger: Array<Record<string, unknown>>;
  ledgerTotals: { calls: number; costNanoUsd: number; voidedNanoUsd: number };
  phases: Array<Record<string, unknown>>;
  patch: { source: "object store" | "run_results.diff" | "none"; text: string; truncated: boolean };
}

function cut(text: string, max: number, keep: "head" | "tail"): { text: string; truncated: boolean } {
  if (text.length <= max) return { text, truncated: false };
  return { text: keep === "head" ? text.slice(0, max) : text.slice(text.length - max), truncated: true };
}

async function blobText(blobs: ObjectStore | null, ref: unknown): Promise<string | null> {
  if (!blobs || typeof ref !== "string" || ref === "") return null;
  const bytes = await blobs.getBlob(ref).catch(() => null);
  return bytes === null ? null : new TextDecoder().decode(bytes);
}

export async function cellDetail(
  db: Db,
  blobs: ObjectStore | null,
  run: string,
  cellId: string,
): Promise<CellDetail> {
  const { row: r, ledger, totals, phases } = await cellDetailRows(db, run, cellId);
  // The row keeps the patch (the results-writer copies every one there); the blob only for a row from before.
  const diff = typeof r?.diff === "string" ? r.diff : null;
  const fromStore = diff === null ? await blobText(blobs, r?.patch_ref) : null;
  const patchText = diff ?? fromStore ?? "";
  const rowOut = r ? { ...r } : null;
  if (rowOut) {
    delete rowOut.diff;
    rowOut.total_cost_nano_usd = r?.total_cost == null ? null : nanoToNumber(usdToNano(String(r.total_cost)));
  }
  return {
    run,
    cellId,
    row: rowOut,
    ledger,
    ledgerTotals: totals,
    phases,
    patch: {
      source: diff !== null ? "run_results.diff" : fromStore !== null ? "object store" : "none",
      ...cut(patchText, PATCH_MAX, "head"),
    },
  };
}
