import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { MAX_SUBMISSION_BYTES, parseSubmission, Rejection } from "../../actors/planner/plan.js";

const enc = (s: string) => new TextEncoder().encode(s);
const good = {
  name: "r",
  harnesses: [{ name: "h", adapter: "command" }],
  models: [{ name: "m" }],
  tasks: ["t"],
};

describe("run submissions", () => {
  it("accepts JSON and YAML", () => {
    assert.equal(parseSubmission(enc(JSON.stringify(good))).name, "r");
    assert.equal(
      parseSubmission(
        enc("name: r\nharnesses: [{name: h, adapter: command}]\nmodels: [{name: m}]\ntasks: [t]\n"),
      ).repeats,
      1,
    );
  });
  it("lists every problem with its path", () => {
    try {
      parseSubmission(
        enc(
          JSON.stringify({ ...good, repeats: -1, parallel_runs: "x", extra: 1, models: [{ name: "a b" }] }),
        ),
      );
      assert.fail("should reject");
    } catch (err) {
      assert.ok(err instanceof Rejection);
      assert.equal(err.runName, "r");
      const paths = err.issues.map((i) => i.path);
      for (const p of ["repeats", "parallel_runs", "models[0].name"])
        assert.ok(paths.includes(p), `${p} in ${paths}`);
      assert.ok(
        err.issues.some((i) => /extra/.test(i.reason)),
        JSON.stringify(err.issues),
      );
    }
  });
  it("refuses oversized, empty, binary, non-object payloads with a reason", () => {
    const cases: Array<[Uint8Array, RegExp]> = [
      [new Uint8Array(MAX_SUBMISSION_BYTES + 1), /limit is/],
      [enc("   "), /empty/],
      [new Uint8Array([0xff, 0xfe, 0x00]), /UTF-8/],
      [enc("[1,2]"), /got a list/],
      [enc("42"), /not a run config/],
      [enc("{ bad json"), /not valid JSON/],
      [enc("a: [unclosed"), /not valid YAML/],
    ];
    for (const [data, re] of cases)
      assert.throws(
        () => parseSubmission(data),
        (e: unknown) => e instanceof Rejection && re.test(`${e.message} ${JSON.stringify(e.issues)}`),
      );
  });
  it("never crashes on arbitrary input: it plans or rejects with reasons", () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.json(),
          fc.string(),
          fc.uint8Array({ maxLength: 512 }).map((a) => a),
        ),
        (input) => {
          const data = typeof input === "string" ? enc(input) : input;
          try {
            parseSubmission(data);
          } catch (err) {
            assert.ok(err instanceof Rejection, String(err));
            assert.ok(err.issues.length > 0);
            assert.ok(err.issues.every((i) => i.reason.length > 0));
          }
        },
      ),
      { numRuns: 1000 },
    );
  });
  it("rejects hostile names in every name field", () => {
    for (const bad of ["..", "a/b", "*", ">", "a b", "x\u0007", "..\\evil"]) {
      const cfg = {
        ...good,
        name: bad,
        harnesses: [{ name: bad, adapter: "command" }],
        models: [{ name: bad }],
      };
      assert.throws(
        () => parseSubmission(enc(JSON.stringify(cfg))),
        (e: unknown) => e instanceof Rejection && e.issues.length >= 3,
      );
    }
  });
});

describe("money limits", () => {
  it("refuses a budget larger than evalfleet can hold exactly, as a rejection with a reason", () => {
    const big = { ...good, budget_usd: 10_000_000 };
    assert.throws(
      () => parseSubmission(enc(JSON.stringify(big))),
      (e: unknown) =>
        e instanceof Rejection && e.issues.some((i) => i.path === "budget_usd" && /at most/.test(i.reason)),
    );
  });
});
