/**
 * Logs written by the 2.x harness (no test-output markers) are graded as that harness graded them, detected from
 * the log itself; 4.x logs keep the 4.x rules (a 4.x log without its markers is still rejected). Fixtures:
 * test/fixtures/swebench-2x (README there says how each was made).
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { outcomeFromLog } from "../../actors/grader-supervisor/backends/common.js";
import { END_TEST_OUTPUT, START_TEST_OUTPUT } from "../../grading/constants.js";
import { parseGradingInstance } from "../../grading/instance.js";
import { logGeneration } from "../../grading/logs.js";
import { pyJsonDumps } from "../../grading/pycompat.js";
import { gradeLog } from "../../grading/report.js";

const FIXTURES = path.resolve(import.meta.dirname, "../fixtures/swebench-2x");
const cases = readdirSync(FIXTURES, { withFileTypes: true })
  .filter((d) => d.isDirectory())
  .map((d) => d.name)
  .sort();

function load(name: string) {
  const dir = path.join(FIXTURES, name);
  return {
    instance: parseGradingInstance(JSON.parse(readFileSync(path.join(dir, "instance.json"), "utf8"))),
    log: readFileSync(path.join(dir, "test_output.txt"), "utf8"),
    expected: readFileSync(path.join(dir, "report.json"), "utf8"),
  };
}

describe("2.x harness logs", () => {
  it("has the six fixtures", () => {
    assert.equal(cases.length, 6);
  });

  for (const name of cases) {
    it(`${name}: report.json as the 2.x harness wrote it`, () => {
      const { instance, log, expected } = load(name);
      assert.equal(log.includes(START_TEST_OUTPUT) || log.includes(END_TEST_OUTPUT), false);
      assert.equal(logGeneration(log), "2.x");
      const r = gradeLog(instance, log, { patch: "diff --git a/x b/x\n" });
      assert.equal(r.logEval?.generation, "2.x");
      assert.equal(pyJsonDumps(r.report), expected);
    });
  }

  it("says why a 2.x log was not graded", () => {
    const notApplied = gradeLog(
      load("django-12050-test-patch-not-applied").instance,
      load("django-12050-test-patch-not-applied").log,
      {
        patch: "p",
      },
    );
    assert.deepEqual(notApplied.logEval?.found === false && notApplied.logEval.rejection, {
      reason: "test_patch_not_applied",
    });
    const reset = load("django-12050-reset-failed");
    const r = gradeLog(reset.instance, reset.log, { patch: "p" });
    assert.deepEqual(r.logEval?.found === false && r.logEval.rejection, {
      reason: "marker",
      marker: "Failed to reset task environment",
    });
  });

  it("the grader scores a complete 2.x log, not as an environment failure or an apply failure", () => {
    const { instance, log } = load("django-12050-full");
    const out = outcomeFromLog({ instance, patch: "p" }, log, "");
    assert.equal(out.kind, "graded");
    assert.equal(out.kind === "graded" && out.status, "RESOLVED_FULL");
  });
});

describe("4.x logs keep the 4.x rules", () => {
  it("a 4.x log cut before its markers is still rejected for them, though it says applied patch", () => {
    const { instance, log } = load("django-12050-full");
    const cut = log.replace("+ git diff ", "+ git -c core.fileMode=false diff ");
    assert.equal(logGeneration(cut), "4.x");
    const r = gradeLog(instance, cut, { patch: "p" });
    assert.equal(r.logEval?.found === false && r.logEval.rejection.reason, "markers_missing");
    assert.equal(r.report[instance.instance_id]?.patch_successfully_applied, false);
  });

  it("a log that is not an eval trace at all (a run log) is 4.x", () => {
    assert.equal(logGeneration("2024-01-01 INFO Applied patch x.py cleanly.\n"), "4.x");
  });
});
