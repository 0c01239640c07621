/**
 * `get_logs_eval`: from a raw evaluation log to a status map, or a rejection — as the harness generation that
 * wrote the log graded it. 4.x logs carry the start / end test-output markers; logs written by the 2.x harness
 * (mid 2024) have none and were graded on the whole log once the test patch had applied.
 */
import { APPLY_PATCH_PASS, END_TEST_OUTPUT, REJECTION_MARKERS, START_TEST_OUTPUT } from "./constants.js";
import type { LogParser, ParserContext, StatusMap } from "./parsers/index.js";
import { universalNewlines } from "./pycompat.js";

/** The harness generation whose rules grade a log. */
export type LogGeneration = "4.x" | "2.x";

/** 2.x also rejected a log on this line (written when the container's repository could not be reset). */
export const LEGACY_RESET_FAILED = "Failed to reset task environment";
/** 2.x's eval script printed `git diff <base>` before the tests; 3.x and 4.x print `git -c core.fileMode=false diff`. */
const LEGACY_DIFF_LINE = /^\+ git diff [0-9a-f]{7,40}[ \t]*$/m;

/** Why a log was rejected before any test was read. */
export type LogRejection =
  | { reason: "marker"; marker: (typeof REJECTION_MARKERS)[number] | typeof LEGACY_RESET_FAILED }
  | { reason: "markers_missing"; missing: string[] }
  /** 2.x: no "applied patch" anywhere in the log, so the test patch never applied. */
  | { reason: "test_patch_not_applied" };

export type LogEval =
  | { found: true; statusMap: StatusMap; usedWholeLog: boolean; generation: LogGeneration }
  | { found: false; statusMap: StatusMap; rejection: LogRejection; generation: LogGeneration };

/**
 * Which rules grade this log: 2.x only when it has neither test-output marker and is the trace of a 2.x eval
 * script (its `+ git diff <base>` line). Anything else is graded as 4.x, so a 4.x log cut short before its markers
 * stays rejected for the missing markers, as the official harness rejects it.
 */
export function logGeneration(rawLog: string): LogGeneration {
  if (rawLog.includes(START_TEST_OUTPUT) || rawLog.includes(END_TEST_OUTPUT)) return "4.x";
  if (rawLog.includes("git -c core.fileMode=false diff")) return "4.x";
  return LEGACY_DIFF_LINE.test(universalNewlines(rawLog)) ? "2.x" : "4.x";
}

/**
 * Mirror of the official algorithm. 4.x: reject on any failure marker, reject when either test-output marker is
 * missing, parse the text between the first start marker and the end marker after it, and if that yields nothing
 * parse the whole log (v4.1 fallback for runners that print outside the markers). 2.x: reject on any failure
 * marker or the reset failure, reject when no "applied patch" appears (case-insensitive), then parse what follows
 * the last `>>>>> Applied Patch (pred)` (the whole log when it has none).
 */
export function evaluateLog(rawLog: string, parser: LogParser, ctx: ParserContext): LogEval {
  const content = universalNewlines(rawLog);
  const generation = logGeneration(content);
  const markers: ReadonlyArray<(typeof REJECTION_MARKERS)[number] | typeof LEGACY_RESET_FAILED> =
    generation === "2.x" ? [...REJECTION_MARKERS, LEGACY_RESET_FAILED] : REJECTION_MARKERS;
  for (const marker of markers) {
    if (content.includes(marker))
      return { found: false, statusMap: new Map(), rejection: { reason: "marker", marker }, generation };
  }
  if (generation === "2.x") {
    if (!content.toLowerCase().includes("applied patch"))
      return {
        found: false,
        statusMap: new Map(),
        rejection: { reason: "test_patch_not_applied" },
        generation,
      };
    const tail = content.split(`${APPLY_PATCH_PASS} (pred)`).at(-1) as string;
    return { found: true, statusMap: parser(tail, ctx), usedWholeLog: false, generation };
  }
  const missing = [START_TEST_OUTPUT, END_TEST_OUTPUT].filter((m) => !content.includes(m));
  if (missing.length > 0)
    return {
      found: false,
      statusMap: new Map(),
      rejection: { reason: "markers_missing", missing },
      generation,
    };

  // content.split(START)[1].split(END)[0]
  const afterStart = content.split(START_TEST_OUTPUT)[1] as string;
  const testContent = afterStart.split(END_TEST_OUTPUT)[0] as string;
  const between = parser(testContent, ctx);
  if (between.size > 0) return { found: true, statusMap: between, usedWholeLog: false, generation };
  return { found: true, statusMap: parser(content, ctx), usedWholeLog: true, generation };
}
