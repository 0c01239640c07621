/** `get_eval_tests_report`, `get_resolution_status` and `get_eval_report` of swebench/harness/grading.py. */

import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import { FAIL_ONLY_REPOS, ResolvedStatus, TestStatus } from "./constants.js";
import type { GradingInstance } from "./instance.js";
import { evaluateLog, type LogEval } from "./logs.js";
import { type LogParser, MAP_REPO_TO_PARSER } from "./parsers/index.js";
import type { StatusMap } from "./parsers/types.js";

export interface SuccessFailure {
  success: string[];
  failure: string[];
}

/** Key order matters: report.json is compared byte for byte with the official one. */
export interface TestsStatus {
  FAIL_TO_PASS: SuccessFailure;
  PASS_TO_PASS: SuccessFailure;
  FAIL_TO_FAIL: SuccessFailure;
  PASS_TO_FAIL: SuccessFailure;
}

export interface InstanceReport {
  patch_is_None: boolean;
  patch_exists: boolean;
  patch_successfully_applied: boolean;
  resolved: boolean;
  tests_status?: TestsStatus;
}

/** report.json: `{ "<instance_id>": InstanceReport }`. */
export type EvalReport = Record<string, InstanceReport>;

function testPassed(name: string, sm: StatusMap): boolean {
  const s = sm.get(name);
  return s === TestStatus.PASSED || s === TestStatus.XFAIL;
}

function testFailed(name: string, sm: StatusMap): boolean {
  const s = sm.get(name);
  return s === undefined || s === TestStatus.FAILED || s === TestStatus.ERROR;
}

/**
 * Classify each expected test. PASS_AND_FAIL: PASSED/XFAIL succeed, FAILED/ERROR/missing fail, and any
 * other status (SKIPPED…) lands in neither list. FAIL_ONLY: only an explicit FAILED fails.
 */
export function getEvalTestsReport(
  statusMap: StatusMap,
  expected: { FAIL_TO_PASS: readonly string[]; PASS_TO_PASS: readonly string[] },
  failOnly = false,
): TestsStatus {
  const classify = (tests: readonly string[]): SuccessFailure => {
    const out: SuccessFailure = { success: [], failure: [] };
    for (const t of tests) {
      if (failOnly) {
        (statusMap.get(t) === TestStatus.FAILED ? out.failure : out.success).push(t);
      } else if (testPassed(t, statusMap)) {
        out.success.push(t);
      } else if (testFailed(t, statusMap)) {
        out.failure.push(t);
      }
    }
    return out;
  };
  return {
    FAIL_TO_PASS: classify(expected.FAIL_TO_PASS),
    PASS_TO_PASS: classify(expected.PASS_TO_PASS),
    // Only filled with calculate_to_fail, which the harness never sets.
    FAIL_TO_FAIL: { success: [], failure: [] },
    PASS_TO_FAIL: { success: [], failure: [] },
  };
}

function ratio(sf: SuccessFailure): number {
  const total = sf.success.length + sf.failure.length;
  return total === 0 ? 1 : sf.success.length / total;
}

/** FULL when every F2P and P2P test succeeds; PARTIAL when some (not all, not none) F2P do and all P2P do. */
export function getResolutionStatus(report: TestsStatus): ResolvedStatus {
  const f2p = ratio(report.FAIL_TO_PASS);
  const p2p = ratio(report.PASS_TO_PASS);
  if (f2p === 1 && p2p === 1) return ResolvedStatus.FULL;
  if (f2p < 1 && f2p > 0 && p2p === 1) return ResolvedStatus.PARTIAL;
  return ResolvedStatus.NO;
}

/** The official parser for a repository, or an error naming what to do. */
export function parserForRepo(repo: string): LogParser {
  const parser = Object.hasOwn(MAP_REPO_TO_PARSER, repo) ? MAP_REPO_TO_PARSER[repo] : undefined;
  if (!parser) {
    throw new EvalfleetError(
      ErrorCode.UnknownTask,
      `no official SWE-bench log parser for repository "${repo}"; supported: ${Object.keys(MAP_REPO_TO_PARSER).join(", ")}`,
    );
  }
  return parser;
}

export interface GradeResult {
  report: EvalReport;
  status: ResolvedStatus;
  logEval: LogEval | null;
}

/**
 * `get_eval_report` with include_tests_status=True, which is how run_instance writes report.json.
 * `patch` null means the prediction had no patch (patch_is_None). `parser` overrides the repo's parser
 * (only for repositories outside the official map).
 */
export function gradeLog(
  instance: GradingInstance,
  log: string,
  opts: { patch?: string | null; parser?: LogParser } = {},
): GradeResult {
  const id = instance.instance_id;
  const entry: InstanceReport = {
    patch_is_None: false,
    patch_exists: false,
    patch_successfully_applied: false,
    resolved: false,
  };
  const report: EvalReport = { [id]: entry };
  if (opts.patch === null) {
    entry.patch_is_None = true;
    return { report, status: ResolvedStatus.NO, logEval: null };
  }
  entry.patch_exists = true;
  const parser = opts.parser ?? parserForRepo(instance.repo);
  const logEval = evaluateLog(log, parser, { instance_id: id });
  if (!logEval.found) return { report, status: ResolvedStatus.NO, logEval };
  entry.patch_successfully_applied = true;
  const tests = getEvalTestsReport(logEval.statusMap, instance, FAIL_ONLY_REPOS.has(instance.repo));
  const status = getResolutionStatus(tests);
  entry.resolved = status === ResolvedStatus.FULL;
  entry.tests_status = tests;
  return { report, status, logEval };
}
