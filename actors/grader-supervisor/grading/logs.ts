/** `get_logs_eval`: from a raw evaluation log to a status map, or a rejection. */
import { END_TEST_OUTPUT, REJECTION_MARKERS, START_TEST_OUTPUT } from "./constants.js";
import type { LogParser, ParserContext, StatusMap } from "./parsers/index.js";
import { universalNewlines } from "./pycompat.js";

/** Why a log was rejected before any test was read. */
export type LogRejection =
  | { reason: "marker"; marker: (typeof REJECTION_MARKERS)[number] }
  | { reason: "markers_missing"; missing: string[] };

export type LogEval =
  | { found: true; statusMap: StatusMap; usedWholeLog: boolean }
  | { found: false; statusMap: StatusMap; rejection: LogRejection };

/**
 * Mirror of the official algorithm: reject on any failure marker, reject when either test-output marker
 * is missing, parse the text between the first start marker and the end marker after it, and if that
 * yields nothing parse the whole log (v4.1 fallback for runners that print outside the markers).
 */
export function evaluateLog(rawLog: string, parser: LogParser, ctx: ParserContext): LogEval {
  const content = universalNewlines(rawLog);
  for (const marker of REJECTION_MARKERS) {
    if (content.includes(marker))
      return { found: false, statusMap: new Map(), rejection: { reason: "marker", marker } };
  }
  const missing = [START_TEST_OUTPUT, END_TEST_OUTPUT].filter((m) => !content.includes(m));
  if (missing.length > 0)
    return { found: false, statusMap: new Map(), rejection: { reason: "markers_missing", missing } };

  // content.split(START)[1].split(END)[0]
  const afterStart = content.split(START_TEST_OUTPUT)[1] as string;
  const testContent = afterStart.split(END_TEST_OUTPUT)[0] as string;
  const between = parser(testContent, ctx);
  if (between.size > 0) return { found: true, statusMap: between, usedWholeLog: false };
  return { found: true, statusMap: parser(content, ctx), usedWholeLog: true };
}
