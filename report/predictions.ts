/**
 * predictions.jsonl in the SWE-bench format: one JSON object per line with exactly instance_id,
 * model_name_or_path and model_patch, so `python -m swebench.harness.run_evaluation --predictions_path` reads it.
 */

import type { PredictionSource } from "../store/report.js";

export type { PredictionSource } from "../store/report.js";

export interface Prediction {
  instance_id: string;
  model_name_or_path: string;
  model_patch: string;
}

export interface PredictionFilter {
  harness?: string;
  model?: string;
  repeat?: number;
}

/** The name a harness × model is published under. */
export function modelNameOrPath(harness: string, model: string): string {
  return `${harness}__${model}`;
}

/**
 * One prediction per cell, in cell order. The patch is the row's diff (what the grader graded: the results-writer
 * keeps every patch there, inline or copied from its blob), else the blob at patch_ref (a row written before it did),
 * else empty (SWE-bench scores an empty patch as unresolved). `missing` lists cells whose patch could not be read; `duplicates` lists instance ids that occur more than once — the official harness keeps one
 * prediction per instance id, so such a file should be narrowed with a filter.
 */
export async function buildPredictions(
  rows: readonly PredictionSource[],
  fetchPatch: (ref: string) => Promise<string | null>,
  filter: PredictionFilter = {},
): Promise<{ predictions: Prediction[]; missing: string[]; duplicates: string[] }> {
  const picked = rows
    .filter(
      (r) =>
        (filter.harness === undefined || r.harness === filter.harness) &&
        (filter.model === undefined || r.model === filter.model) &&
        (filter.repeat === undefined || r.repeat === filter.repeat),
    )
    .sort((a, b) => a.cellId.localeCompare(b.cellId));
  const predictions: Prediction[] = [];
  const missing: string[] = [];
  const seen = new Map<string, number>();
  for (const r of picked) {
    let patch: string | null = r.diff;
    if (patch === null && r.patchRef) {
      patch = await fetchPatch(r.patchRef);
      if (patch === null) missing.push(r.cellId);
    }
    predictions.push({
      instance_id: r.taskId,
      model_name_or_path: modelNameOrPath(r.harness, r.model),
      model_patch: patch ?? "",
    });
    seen.set(r.taskId, (seen.get(r.taskId) ?? 0) + 1);
  }
  const duplicates = [...seen].filter(([, n]) => n > 1).map(([id]) => id);
  return { predictions, missing, duplicates };
}

export function predictionsJsonl(predictions: readonly Prediction[]): string {
  return predictions.map((p) => `${JSON.stringify(p)}\n`).join("");
}
