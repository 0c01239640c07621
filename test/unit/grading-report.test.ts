/** Log rejection, report rules, the two runs that produced no report, and the grade-log command. */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { Command } from "commander";
import { gradeLogFiles, register } from "../../cli/commands/grade-log.js";
import {
  APPLY_PATCH_FAIL,
  END_TEST_OUTPUT,
  type GradingInstance,
  gradeLog,
  parseGradingInstance,
  pyJsonDumps,
  RESET_FAILED,
  START_TEST_OUTPUT,
  TESTS_ERROR,
  TESTS_TIMEOUT,
} from "../../grading/index.js";
import { EvalfleetError } from "../../protocol/errors.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const casesDir = path.resolve(repoRoot, "../shared/conformance/swebench/cases");
const astropyCase = path.join(casesDir, "astropy__astropy-14365__vexp-swebench-1774184993333");

const inst = (over: Partial<GradingInstance> = {}): GradingInstance => ({
  instance_id: "owner__repo-1",
  repo: "pytest-dev/pytest",
  version: null,
  FAIL_TO_PASS: ["t.py::f2p"],
  PASS_TO_PASS: ["t.py::p2p"],
  ...over,
});

const wrap = (body: string, before = "+ setup\n") =>
  `${before}+ : '${START_TEST_OUTPUT}'\n${body}\n+ : '${END_TEST_OUTPUT}'\n+ git checkout abc t.py\n`;

const notApplied = (id = "owner__repo-1") => ({
  [id]: { patch_is_None: false, patch_exists: true, patch_successfully_applied: false, resolved: false },
});

describe("log rejection (get_logs_eval)", () => {
  for (const marker of [APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT]) {
    it(`a log containing "${marker}" is not graded`, () => {
      const r = gradeLog(inst(), wrap(`PASSED t.py::f2p\nPASSED t.py::p2p\n${marker}`));
      assert.deepEqual(r.report, notApplied());
      assert.deepEqual(r.logEval?.found === false && r.logEval.rejection, { reason: "marker", marker });
    });
  }

  it("a log missing either marker is not graded", () => {
    const r = gradeLog(inst(), `+ : '${START_TEST_OUTPUT}'\nPASSED t.py::f2p\n`);
    assert.deepEqual(r.report, notApplied());
    assert.deepEqual(r.logEval?.found === false && r.logEval.rejection, {
      reason: "markers_missing",
      missing: [END_TEST_OUTPUT],
    });
  });

  it("parses only between the markers, unless that yields nothing (then the whole log)", () => {
    const between = gradeLog(inst(), wrap("PASSED t.py::f2p\nPASSED t.py::p2p", "FAILED t.py::f2p\n"));
    assert.equal(between.status, "RESOLVED_FULL");
    assert.equal(between.logEval?.found && between.logEval.usedWholeLog, false);
    const whole = gradeLog(
      inst(),
      wrap("(runner printed to another stream)", "PASSED t.py::f2p\nPASSED t.py::p2p\n"),
    );
    assert.equal(whole.status, "RESOLVED_FULL");
    assert.equal(whole.logEval?.found && whole.logEval.usedWholeLog, true);
  });

  it("reads the log with universal newlines, as Python's open() does", () => {
    const r = gradeLog(inst(), wrap("progress 10%\rPASSED t.py::f2p\r\nPASSED t.py::p2p"));
    assert.equal(r.status, "RESOLVED_FULL");
  });
});

describe("report rules (get_eval_tests_report / get_resolution_status)", () => {
  const tests = (r: ReturnType<typeof gradeLog>) => r.report["owner__repo-1"]?.tests_status;

  it("XFAIL counts as success; SKIPPED lands in neither list; missing fails", () => {
    const r = gradeLog(
      inst({ FAIL_TO_PASS: ["a", "b"], PASS_TO_PASS: ["c", "d"] }),
      wrap("XFAIL a\nSKIPPED b\nPASSED c"),
    );
    assert.deepEqual(tests(r)?.FAIL_TO_PASS, { success: ["a"], failure: [] });
    assert.deepEqual(tests(r)?.PASS_TO_PASS, { success: ["c"], failure: ["d"] });
    assert.equal(r.status, "RESOLVED_NO");
  });

  it("some but not all FAIL_TO_PASS with every PASS_TO_PASS is PARTIAL, which is not resolved", () => {
    const r = gradeLog(
      inst({ FAIL_TO_PASS: ["a", "b"], PASS_TO_PASS: ["c"] }),
      wrap("PASSED a\nFAILED b\nPASSED c"),
    );
    assert.equal(r.status, "RESOLVED_PARTIAL");
    assert.equal(r.report["owner__repo-1"]?.resolved, false);
  });

  it("empty lists count as fully passing", () => {
    const r = gradeLog(inst({ FAIL_TO_PASS: [], PASS_TO_PASS: [] }), wrap("nothing"));
    assert.equal(r.status, "RESOLVED_FULL");
  });

  it("fail-only repositories count everything not explicitly FAILED as success", () => {
    const r = gradeLog(
      inst({ repo: "markedjs/marked", FAIL_TO_PASS: ["x", "y"], PASS_TO_PASS: ["z"] }),
      wrap("1) y"),
    );
    assert.deepEqual(tests(r)?.FAIL_TO_PASS, { success: ["x"], failure: ["y"] });
    assert.deepEqual(tests(r)?.PASS_TO_PASS, { success: ["z"], failure: [] });
  });

  it("a missing patch is patch_is_None and nothing else", () => {
    const r = gradeLog(inst(), wrap("PASSED t.py::f2p"), { patch: null });
    assert.deepEqual(r.report, {
      "owner__repo-1": {
        patch_is_None: true,
        patch_exists: false,
        patch_successfully_applied: false,
        resolved: false,
      },
    });
  });

  it("report.json text matches json.dumps(indent=4), non-ASCII escaped", () => {
    const r = gradeLog(inst({ FAIL_TO_PASS: ["tést[α]"], PASS_TO_PASS: [] }), wrap("PASSED tést[α]"));
    assert.match(pyJsonDumps(r.report), /"t\\u00e9st\[\\u03b1\]"/);
    assert.match(pyJsonDumps(r.report), /^\{\n {4}"owner__repo-1": \{\n {8}"patch_is_None": false,/);
  });
});

describe("the runs that produced no report grade as the official harness", () => {
  it("apply failure (astropy-11693): rejected on the marker, unresolved", () => {
    const dir = path.join(casesDir, "_special/astropy__astropy-11693__TinyLlama-1.1B-saadan1234-2024-09");
    const runLog = readFileSync(path.join(dir, "run_instance.log"), "utf8");
    const r = gradeLog(inst({ instance_id: "astropy__astropy-11693", repo: "astropy/astropy" }), runLog);
    assert.deepEqual(r.report, notApplied("astropy__astropy-11693"));
    assert.deepEqual(r.logEval?.found === false && r.logEval.rejection, {
      reason: "marker",
      marker: APPLY_PATCH_FAIL,
    });
  });

  it("log that stops before the tests (xarray-6992): no markers, unresolved", () => {
    const dir = path.join(casesDir, "_special/pydata__xarray-6992__vexp-swebench-1774184993333");
    const runLog = readFileSync(path.join(dir, "run_instance.log"), "utf8");
    const r = gradeLog(inst({ instance_id: "pydata__xarray-6992", repo: "pydata/xarray" }), runLog);
    assert.deepEqual(r.report, notApplied("pydata__xarray-6992"));
    assert.equal(r.logEval?.found === false && r.logEval.rejection.reason, "markers_missing");
  });
});

describe("instance records", () => {
  it("accepts JSON-encoded test lists and a missing version", () => {
    const i = parseGradingInstance({
      instance_id: "a__b-1",
      repo: "psf/requests",
      FAIL_TO_PASS: '["x"]',
      PASS_TO_PASS: "[]",
    });
    assert.deepEqual([i.FAIL_TO_PASS, i.PASS_TO_PASS, i.version], [["x"], [], null]);
  });
  it("lists every problem at once", () => {
    try {
      parseGradingInstance({ repo: "", FAIL_TO_PASS: "[x", PASS_TO_PASS: [1] });
      assert.fail("should throw");
    } catch (err) {
      assert.deepEqual(
        (err as EvalfleetError).issues.map((i) => i.path),
        ["instance_id", "repo", "FAIL_TO_PASS", "PASS_TO_PASS"],
      );
    }
  });
});

describe("evalfleet grade-log", () => {
  async function runCli(args: string[]): Promise<{ stdout: string; stderr: string }> {
    const program = new Command("evalfleet").exitOverride();
    let stdout = "";
    let stderr = "";
    register(program, {
      out: (s) => {
        stdout += s;
      },
      err: (s) => {
        stderr += s;
      },
    });
    await program.parseAsync(["node", "evalfleet", "grade-log", ...args]);
    return { stdout, stderr };
  }

  it("prints the official report.json", async () => {
    const out = await runCli([
      "--instance",
      path.join(astropyCase, "instance.json"),
      "--log",
      path.join(astropyCase, "test_output.txt"),
      "--json",
    ]);
    assert.equal(out.stdout, `${readFileSync(path.join(astropyCase, "report.json"), "utf8")}\n`);
    assert.equal(out.stderr, "");
  });

  it("without --json also says the verdict on stderr", async () => {
    const out = await runCli([
      "--instance",
      path.join(astropyCase, "instance.json"),
      "--log",
      path.join(astropyCase, "test_output.txt"),
    ]);
    assert.match(out.stderr, /RESOLVED_FULL \(FAIL_TO_PASS 1\/1, PASS_TO_PASS 8\/8\)/);
  });

  it("picks a record from a JSONL dataset with --instance-id", async () => {
    const jsonl = path.resolve(casesDir, "../instances/swe-bench-verified-100__vexp.jsonl");
    const { result } = await gradeLogFiles({
      instance: jsonl,
      log: path.join(astropyCase, "test_output.txt"),
      instanceId: "astropy__astropy-14365",
    });
    assert.equal(result.status, "RESOLVED_FULL");
  });

  it("bad input says what is wrong and what to do", async () => {
    const tmp = mkdtempSync(path.join(tmpdir(), "grade-log-"));
    const bad = path.join(tmp, "bad.json");
    writeFileSync(bad, "{not json");
    const log = path.join(astropyCase, "test_output.txt");
    const cases: Array<[string, string, RegExp]> = [
      [path.join(tmp, "missing.json"), log, /cannot read --instance .*no such file/],
      [bad, log, /is not valid JSON/],
      [path.join(astropyCase, "instance.json"), path.join(tmp, "nope.txt"), /cannot read --log/],
    ];
    for (const [instance, logFile, message] of cases) {
      await assert.rejects(gradeLogFiles({ instance, log: logFile }), (err: unknown) => {
        assert.ok(err instanceof EvalfleetError);
        assert.equal(err.code, "EF_INVALID_CONFIG");
        assert.match(err.message, message);
        assert.ok(err.issues.length > 0 && err.issues.every((i) => i.reason.length > 0));
        return true;
      });
    }
    writeFileSync(bad, JSON.stringify({ instance_id: "a__b-1", repo: "psf/requests" }));
    await assert.rejects(gradeLogFiles({ instance: bad, log }), (err: unknown) => {
      assert.ok(err instanceof EvalfleetError);
      assert.deepEqual(
        err.issues.map((i) => i.path),
        ["FAIL_TO_PASS", "PASS_TO_PASS"],
      );
      return true;
    });
    writeFileSync(
      bad,
      JSON.stringify({ instance_id: "a__b-1", repo: "nobody/knows", FAIL_TO_PASS: [], PASS_TO_PASS: [] }),
    );
    await assert.rejects(
      gradeLogFiles({ instance: bad, log }),
      /no official SWE-bench log parser for repository "nobody\/knows"/,
    );
  });
});
