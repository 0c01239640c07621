import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { BlobNames } from "../../protocol/subjects.js";
import { buildReport } from "../../report/aggregate.js";
import { formatJson, formatTable } from "../../report/format.js";
import { sampleInput } from "./report-fixtures.js";

describe("the report says how attempts were isolated and what was refused", () => {
  it("unsandboxed attempts are said plainly; security refusals are counted and listed", () => {
    const r = buildReport({
      ...sampleInput(),
      sandboxes: { process: 3, container: 1 },
      security: [
        {
          check: "unclaimed_attempt",
          cellId: "c1",
          attempt: 9,
          ref: "result",
          actor: "results-writer",
          detail: "refused a result for c1 attempt 9: the dispatcher never claimed that attempt",
          createdAt: "2026-12-01T00:00:00.000Z",
        },
        {
          check: "foreign_blob_ref",
          cellId: "c2",
          attempt: 0,
          ref: "other/x/0/patch.diff",
          actor: "grader-supervisor",
          detail: "grader refused patch",
          createdAt: "2026-12-01T00:00:01.000Z",
        },
      ],
    });
    const text = formatTable(r);
    assert.match(text, /Sandbox: 1 in containers, 3 UNSANDBOXED \(plain processes\)/);
    assert.match(text, /UNSANDBOXED: those harnesses ran as processes/);
    assert.match(text, /Security: 2 forged messages refused \(unclaimed_attempt 1, foreign_blob_ref 1\)/);
    assert.match(text, /results-writer: refused a result for c1 attempt 9/);
    const json = JSON.parse(formatJson(r)) as {
      security: { total: number };
      sandboxes: Record<string, number>;
    };
    assert.equal(json.security.total, 2);
    assert.deepEqual(json.sandboxes, { process: 3, container: 1 });
  });

  it("a run with nothing refused and every attempt contained says so", () => {
    const text = formatTable(buildReport({ ...sampleInput(), sandboxes: { container: 4 }, security: [] }));
    assert.match(text, /Sandbox: 4 in containers/);
    assert.doesNotMatch(text, /UNSANDBOXED/);
    assert.match(text, /Security: no forged results/);
  });

  it("a blob belongs to an attempt only under its own prefix", () => {
    const own = BlobNames.attempt("r.1", "c:1", 2, "patch.diff");
    assert.equal(BlobNames.ownedBy(own, "r.1", "c:1", 2), true);
    for (const other of [
      BlobNames.attempt("r.1", "c:1", 3, "patch.diff"),
      BlobNames.attempt("r.2", "c:1", 2, "patch.diff"),
      BlobNames.attempt("r.1", "c:2", 2, "patch.diff"),
      `${BlobNames.attemptPrefix("r.1", "c:1", 2)}x/../../../other/patch.diff`,
      `${BlobNames.attemptPrefix("r.1", "c:1", 2)}`,
      "patch.diff",
      "",
    ])
      assert.equal(BlobNames.ownedBy(other, "r.1", "c:1", 2), false, other);
  });
});
