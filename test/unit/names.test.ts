import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { decodeToken, encodeToken, nameProblem, safeSlug } from "../../protocol/names.js";
import { ProgressKeys, Subjects } from "../../protocol/subjects.js";

const KV_KEY = /^[-/=_A-Za-z0-9]+(\.[-/=_A-Za-z0-9]+)*$/;

describe("names become tokens safely", () => {
  it("encodeToken is reversible and yields one subject token of KV-safe characters", () => {
    fc.assert(
      fc.property(fc.string({ minLength: 1, maxLength: 60, unit: "binary" }), (s) => {
        const t = encodeToken(s);
        assert.match(t, /^[A-Za-z0-9_=-]+$/);
        assert.equal(decodeToken(t), s);
      }),
      { numRuns: 2000 },
    );
  });

  it("hostile names never split or widen a subject or KV key", () => {
    for (const bad of [
      "..",
      "a.b",
      "*",
      ">",
      "a b",
      "x\ny",
      "\u0000",
      "ünï/cødé",
      "../../etc/passwd",
      "run.>",
    ]) {
      const subject = Subjects.ledger.one(bad, bad);
      assert.equal(subject.split(".").length, 3, subject);
      assert.ok(!/[*> \n\u0000]/.test(subject), subject);
      assert.match(ProgressKeys.cell(bad, bad), KV_KEY);
    }
  });

  it("safeSlug yields path- and container-safe names, distinct for distinct inputs", () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 200 }),
        fc.string({ minLength: 1, maxLength: 200 }),
        (a, b) => {
          const sa = safeSlug(a);
          assert.match(sa, /^[A-Za-z0-9_][A-Za-z0-9_.-]*$/);
          assert.ok(!sa.includes(".."));
          assert.ok(sa.length <= 120);
          if (a !== b) assert.notEqual(sa, safeSlug(b));
        },
      ),
      { numRuns: 2000 },
    );
    assert.equal(safeSlug("h__m__t__r0"), "h__m__t__r0");
  });

  it("nameProblem explains what is wrong", () => {
    assert.equal(nameProblem("claude-sonnet-4.5"), undefined);
    assert.match(nameProblem("a/b") ?? "", /contains '\/'/);
    assert.match(nameProblem("..x") ?? "", /'\.\.'/);
    assert.match(nameProblem("-x") ?? "", /must not start/);
    assert.match(nameProblem("a\u0001") ?? "", /\\x01/);
    assert.match(nameProblem("x".repeat(129)) ?? "", /limit is 128/);
  });
});
