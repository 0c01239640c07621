import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { buildPredictions, type PredictionSource, predictionsJsonl } from "../../report/predictions.js";

const src = (
  p: Partial<PredictionSource> & Pick<PredictionSource, "cellId" | "taskId">,
): PredictionSource => ({
  harness: "claude-code",
  model: "claude-sonnet-4-5",
  repeat: 0,
  patchRef: null,
  diff: null,
  ...p,
});

describe("predictions.jsonl (SWE-bench format)", () => {
  const rows = [
    // The row keeps the patch (the results-writer copies every one into diff): its blob, pruned, is not read.
    src({
      cellId: "c0",
      taskId: "pallets__flask-0",
      patchRef: "r/c0/0/patch.diff",
      diff: "diff --git a/z b/z\n+kept\n",
    }),
    // A row from before the writer kept patches: its blob.
    src({ cellId: "c2", taskId: "django__django-1", patchRef: "r/c2/0/patch.diff" }),
    src({ cellId: "c1", taskId: "astropy__astropy-2", diff: "diff --git a/x b/x\n" }),
    src({ cellId: "c3", taskId: "sympy__sympy-3" }),
    src({ cellId: "c4", taskId: "sympy__sympy-3", repeat: 1, patchRef: "gone" }),
  ];
  const blobs: Record<string, string> = { "r/c2/0/patch.diff": "diff --git a/y b/y\n+fix\n" };
  const fetch = async (ref: string) => blobs[ref] ?? null;

  it("exactly three keys per line; patch from the row's diff, else the object store, else empty", async () => {
    const fetched: string[] = [];
    const out = await buildPredictions(rows, async (ref) => {
      fetched.push(ref);
      return fetch(ref);
    });
    const lines = predictionsJsonl(out.predictions).trimEnd().split("\n");
    assert.equal(lines.length, 5);
    const parsed = lines.map((l) => JSON.parse(l) as Record<string, string>);
    for (const p of parsed)
      assert.deepEqual(Object.keys(p), ["instance_id", "model_name_or_path", "model_patch"]);
    assert.equal(parsed[0]!.model_patch, "diff --git a/z b/z\n+kept\n");
    assert.deepEqual(parsed[1], {
      instance_id: "astropy__astropy-2",
      model_name_or_path: "claude-code__claude-sonnet-4-5",
      model_patch: "diff --git a/x b/x\n",
    });
    assert.equal(parsed[2]!.model_patch, "diff --git a/y b/y\n+fix\n");
    assert.equal(parsed[3]!.model_patch, "");
    assert.deepEqual(fetched, ["r/c2/0/patch.diff", "gone"], "a row holding its patch reads no blob");
    assert.deepEqual(out.missing, ["c4"]);
    assert.deepEqual(out.duplicates, ["sympy__sympy-3"]);
  });

  it("filters narrow the export to one prediction per instance", async () => {
    const out = await buildPredictions(rows, fetch, { repeat: 0, harness: "claude-code" });
    assert.equal(out.predictions.length, 4);
    assert.deepEqual(out.duplicates, []);
    assert.equal((await buildPredictions(rows, fetch, { model: "nope" })).predictions.length, 0);
  });
});
