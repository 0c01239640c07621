/** Constants of the official SWE-bench harness v4.x (swebench/harness/constants/__init__.py). */

/** Version of evalfleet's grading semantics; part of the results cache key, bump on any verdict change. */
export const GRADER_VERSION = "swebench-4.1.0+evalfleet.1";

// Markers the harness writes into logs. Any of the first four rejects a log outright.
export const APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed";
export const APPLY_PATCH_PASS = ">>>>> Applied Patch";
export const RESET_FAILED = ">>>>> Reset Failed";
export const TESTS_ERROR = ">>>>> Tests Errored";
export const TESTS_TIMEOUT = ">>>>> Tests Timed Out";
export const START_TEST_OUTPUT = ">>>>> Start Test Output";
export const END_TEST_OUTPUT = ">>>>> End Test Output";

/** Checked in this order by `get_logs_eval`; the first present rejects the log. */
export const REJECTION_MARKERS = [APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT] as const;

export const TestStatus = {
  FAILED: "FAILED",
  PASSED: "PASSED",
  SKIPPED: "SKIPPED",
  ERROR: "ERROR",
  XFAIL: "XFAIL",
} as const;
export type TestStatus = (typeof TestStatus)[keyof typeof TestStatus];
/** Enum iteration order in Python, used by `any(line.startswith(x.value) for x in TestStatus)`. */
export const TEST_STATUS_VALUES: readonly string[] = Object.values(TestStatus);

export const ResolvedStatus = {
  NO: "RESOLVED_NO",
  PARTIAL: "RESOLVED_PARTIAL",
  FULL: "RESOLVED_FULL",
} as const;
export type ResolvedStatus = (typeof ResolvedStatus)[keyof typeof ResolvedStatus];

/** Repositories graded "fail only": anything not explicitly FAILED counts as success. */
export const FAIL_ONLY_REPOS: ReadonlySet<string> = new Set([
  "chartjs/Chart.js",
  "processing/p5.js",
  "markedjs/marked",
]);

// Where the official images expect things.
export const DOCKER_PATCH = "/tmp/patch.diff";
export const DOCKER_EVAL_SCRIPT = "/eval.sh";
export const DOCKER_USER = "root";
export const DOCKER_WORKDIR = "/testbed";
export const HEREDOC_DELIMITER = "EOF_114329324912";

/**
 * The patch-apply fallback chain of run_evaluation.py (GIT_APPLY_CMDS): each is run with the patch path
 * appended, in the repository directory, and the first to exit 0 wins. If none does, the harness logs
 * APPLY_PATCH_FAIL and the instance is an error with no report.
 */
export const APPLY_PATCH_COMMANDS: readonly (readonly string[])[] = [
  ["git", "apply", "--verbose"],
  ["git", "apply", "--verbose", "--reject"],
  ["patch", "--batch", "--fuzz=5", "-p1", "-i"],
];

/** Default per-instance test timeout of the official harness CLI (seconds). */
export const DEFAULT_TIMEOUT_S = 1800;

/** Files whose extension means "not a test" when deriving test directives from a test patch. */
export const NON_TEST_EXTS = [
  ".json",
  ".png",
  "csv",
  ".txt",
  ".md",
  ".jpg",
  ".jpeg",
  ".pkl",
  ".yml",
  ".yaml",
  ".toml",
] as const;
