/**
 * The 98 official verdicts in ../shared/conformance/swebench: every report.json must come out identical,
 * byte for byte (and so per test), from the instance record and the saved log alone.
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { parseGradingInstance } from "../../grading/instance.js";
import { pyJsonDumps } from "../../grading/pycompat.js";
import { gradeLog } from "../../grading/report.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
export const CONFORMANCE = path.resolve(repoRoot, "../shared/conformance/swebench");
const casesDir = path.join(CONFORMANCE, "cases");

interface ManifestCase {
  case_dir: string;
  status: string;
  used_whole_log_fallback: boolean;
}

const manifest: { cases: ManifestCase[] } = JSON.parse(
  readFileSync(path.join(casesDir, "manifest.json"), "utf8"),
);

describe("SWE-bench conformance: report.json reproduced exactly", () => {
  it("has all 98 cases", () => {
    assert.equal(manifest.cases.length, 98);
  });

  for (const c of manifest.cases) {
    it(c.case_dir, () => {
      const dir = path.join(casesDir, c.case_dir);
      const instance = parseGradingInstance(
        JSON.parse(readFileSync(path.join(dir, "instance.json"), "utf8")),
      );
      const log = readFileSync(path.join(dir, "test_output.txt"), "utf8");
      const expected = readFileSync(path.join(dir, "report.json"), "utf8");
      const { report, status, logEval } = gradeLog(instance, log, {
        patch: readFileSync(path.join(dir, "patch.diff"), "utf8"),
      });
      assert.deepEqual(report, JSON.parse(expected));
      assert.equal(pyJsonDumps(report), expected);
      assert.equal(status, c.status);
      assert.equal(logEval?.found && logEval.usedWholeLog, c.used_whole_log_fallback);
    });
  }
});

describe("SWE-bench conformance: runs that produced no report", () => {
  const special = path.join(casesDir, "_special");
  it("the special cases are present", () => {
    assert.ok(existsSync(special));
    assert.equal(readdirSync(special).length, 2);
  });
});
