/** JavaScript-repository parsers (SWE-bench Multimodal / JS) of swebench/harness/log_parsers/javascript.py. */
import { TestStatus } from "../constants.js";
import {
  ansiEscape,
  BOL,
  D,
  DOT,
  EOL,
  indentOf,
  ParserCrash,
  pyRstrip,
  pyStrip,
  re,
  S,
  S_NO_NL,
  startsWithAny,
  W,
} from "../pycompat.js";
import type { LogParser, StatusMap } from "./types.js";

function mustMatch(pattern: RegExp, line: string): RegExpExecArray {
  const m = pattern.exec(line);
  // Python calls `.group(1)` on the result unguarded, raising AttributeError.
  if (!m) throw new ParserCrash(`AttributeError: no match for ${pattern.source} in ${JSON.stringify(line)}`);
  return m;
}

const HAS_MS = re(`\\(${D}+ms\\)`);
const CALYPSO = {
  "✓": { timed: re(`^${S}+✓${S}(${DOT}*)\\(${D}+ms\\)$`), plain: re(`^${S}+✓${S}(${DOT}*)`) },
  "✕": { timed: re(`^${S}+✕${S}(${DOT}*)\\(${D}+ms\\)$`), plain: re(`^${S}+✕${S}(${DOT}*)`) },
} as const;

/** wp-calypso: jest --verbose output, suites tracked by indentation. */
export const parseCalypso: LogParser = (log) => {
  const map: StatusMap = new Map();
  let suite: Array<[string, number]> = [];
  const testName = (symbol: "✓" | "✕", line: string): string => {
    const pattern = HAS_MS.test(line) ? CALYPSO[symbol].timed : CALYPSO[symbol].plain;
    const name = mustMatch(pattern, line)[1] as string;
    return pyStrip([suite.map((s) => s[0]).join(" - "), name].join(" - "));
  };
  for (const chunk of log.split(" ./node_modules/.bin/jest ").slice(1)) {
    for (const line of chunk.split("\n")) {
      if (startsWithAny(line, ["Test Suites", "  ● "])) break;
      const stripped = pyStrip(line);
      if (stripped.startsWith("✓")) {
        map.set(testName("✓", line), TestStatus.PASSED);
      } else if (stripped.startsWith("✕")) {
        map.set(testName("✕", line), TestStatus.FAILED);
      } else if (indentOf(line) > 0) {
        const indent = indentOf(line);
        if (suite.length === 0) {
          suite = [[stripped, indent]];
        } else {
          while (suite.length > 0 && (suite.at(-1) as [string, number])[1] >= indent) suite.pop();
          suite.push([stripped, indent]);
        }
      }
    }
  }
  return map;
};

const CHART_JS_FAILURE = re(`Chrome${S}[${D}.]+${S_NO_NL}\\(${DOT}+?\\)${S_NO_NL}(${DOT}*)FAILED${EOL}`, "g");

/** Chart.js: karma in Chrome; only failures are printed (a fail-only repository). */
export const parseChartJs: LogParser = (log) => {
  const map: StatusMap = new Map();
  for (const m of ansiEscape(log).matchAll(CHART_JS_FAILURE)) map.set(m[1] as string, TestStatus.FAILED);
  return map;
};

const MARKED_FAILURE = re(`^${D}+\\)${S}(${DOT}*)`);

/** marked: numbered failure list "1) name" (a fail-only repository). */
export const parseMarked: LogParser = (log) => {
  const map: StatusMap = new Map();
  for (const line of log.split("\n")) {
    const m = MARKED_FAILURE.exec(line);
    if (m) map.set(pyStrip(m[1] as string), TestStatus.FAILED);
  }
  return map;
};

function removeJsonBlocks(log: string): string {
  const kept: string[] = [];
  let inObject = false;
  let inList = false;
  for (const line of log.split("\n")) {
    const s = pyRstrip(line);
    if (s.endsWith("{")) {
      inObject = true;
      continue;
    }
    if (s.endsWith("[")) {
      inList = true;
      continue;
    }
    if (s === "}" && inObject) {
      inObject = false;
      continue;
    }
    if (s === "]" && inList) {
      inList = false;
      continue;
    }
    if (inObject || inList) continue;
    if (s.startsWith("{") && s.endsWith("}")) continue;
    if (s.startsWith("[") && s.endsWith("]")) continue;
    kept.push(line);
  }
  return kept.join("\n");
}

const XML_BLOCK = re(`<(${W}+)>[^]*?<\\/\\1>`);

function countOccurrences(haystack: string, needle: string): number {
  return haystack.split(needle).length - 1;
}

function removeXmlBlocks(log: string): string {
  let content = log;
  let m = XML_BLOCK.exec(content);
  while (m) {
    const tag = m[1] as string;
    const opening = Math.max(countOccurrences(m[0], `<${tag}>`) - 1, 0);
    content = content.slice(0, m.index) + `<${tag}>`.repeat(opening) + content.slice(m.index + m[0].length);
    m = XML_BLOCK.exec(content);
  }
  return content;
}

const P5_FAILURE = re(`${BOL}${S}*(${D}+)\\)([^]{0,1000}?):`, "g");

/** p5.js: mocha failures "1) suite\n   test:", with JSON/XML dumps removed first (fail-only). */
export const parseP5js: LogParser = (log) => {
  const cleaned = removeXmlBlocks(removeJsonBlocks(ansiEscape(log)));
  const map: StatusMap = new Map();
  for (const m of cleaned.matchAll(P5_FAILURE)) {
    const lines = (m[2] as string).split("\n");
    // A real failure title is a chain of strictly deeper-indented lines.
    let last = 0;
    let valid = true;
    for (const line of lines) {
      const indent = indentOf(line);
      if (indent <= last) {
        valid = false;
        break;
      }
      last = indent;
    }
    if (valid) map.set(lines.map(pyStrip).join(":"), TestStatus.FAILED);
  }
  return map;
};

const REACT_PDF: Array<[RegExp, string]> = [
  [re(`^PASS${S}(${DOT}*)${S}\\([${D}.]+ms\\)`), TestStatus.PASSED],
  [re(`^PASS${S}(${DOT}*)${S}\\([${D}.]+${S}s\\)`), TestStatus.PASSED],
  [re(`^PASS${S}(${DOT}*)${S}\\([${D}.]+s\\)`), TestStatus.PASSED],
  [re(`^PASS${S}(${DOT}*)`), TestStatus.PASSED],
  [re(`^FAIL${S}(${DOT}*)${S}\\([${D}.]+ms\\)`), TestStatus.FAILED],
  [re(`^FAIL${S}(${DOT}*)${S}\\([${D}.]+${S}s\\)`), TestStatus.FAILED],
  [re(`^FAIL${S}(${DOT}*)${S}\\([${D}.]+s\\)`), TestStatus.FAILED],
  [re(`^FAIL${S}(${DOT}*)`), TestStatus.FAILED],
];

/** react-pdf: jest per-file "PASS path (12ms)". */
export const parseReactPdf: LogParser = (log) => {
  const map: StatusMap = new Map();
  for (const line of log.split("\n")) {
    for (const [pattern, status] of REACT_PDF) {
      const m = pattern.exec(line);
      if (m) {
        map.set(m[1] as string, status);
        break;
      }
    }
  }
  return map;
};

const JEST = re(`^${S}*(✓|✕|○)${S}(${DOT}+?)(?:${S}\\((${D}+${S}*m?s)\\))?$`);
const SYMBOL_STATUS: Record<string, string> = {
  "✓": TestStatus.PASSED,
  "✕": TestStatus.FAILED,
  "○": TestStatus.SKIPPED,
  "×": TestStatus.FAILED,
  "↓": TestStatus.SKIPPED,
  "✔": TestStatus.PASSED,
  "✖": TestStatus.FAILED,
};

/** jest --verbose: "✓ name (3 ms)". */
export const parseJest: LogParser = (log) => {
  const map: StatusMap = new Map();
  for (const line of log.split("\n")) {
    const m = JEST.exec(pyStrip(line));
    if (m) map.set(m[2] as string, SYMBOL_STATUS[m[1] as string] as string);
  }
  return map;
};

const JEST_JSON = re(`^\\[(PASSED|FAILED)\\]${S}(${DOT}+)$`);

/** jest --json piped through the harness's jq transform: "[PASSED] full name". */
export const parseJestJson: LogParser = (log) => {
  const map: StatusMap = new Map();
  for (const line of log.split("\n")) {
    const m = JEST_JSON.exec(pyStrip(line));
    if (m) map.set(m[2] as string, m[1] as string);
  }
  return map;
};

const VITEST = re(`^${S}*(✓|×|↓)${S}(${DOT}+?)(?:${S}(${D}+${S}*m?s?|\\[skipped\\]))?$`);

/** vitest --reporter=verbose: "✓ file > name 3ms". */
export const parseVitest: LogParser = (log) => {
  const map: StatusMap = new Map();
  for (const line of log.split("\n")) {
    const m = VITEST.exec(pyStrip(line));
    if (m) map.set(m[2] as string, SYMBOL_STATUS[m[1] as string] as string);
  }
  return map;
};

const KARMA = re(`^(${S}*)?([✔✖])?${S}(${DOT}*)$`);

/** karma (preact): describe blocks by indentation, "✔ name" / "✖ name", until "SUMMARY:". */
export const parseKarma: LogParser = (log) => {
  const map: StatusMap = new Map();
  let currentIndent = -1;
  const currentSuite: string[] = [];
  let started = false;
  for (const line of log.split("\n")) {
    if (line.startsWith("SUMMARY:")) return map;
    if (line.includes("Starting browser")) {
      started = true;
      continue;
    }
    if (!started) continue;
    const m = KARMA.exec(line);
    if (!m) continue;
    const indent = m[1];
    const status = m[2];
    const name = m[3] as string;
    if (indent && !status) {
      if (indent.length > currentIndent) {
        currentIndent = indent.length;
        currentSuite.push(name);
      } else if (indent.length < currentIndent) {
        currentIndent = indent.length;
        if (currentSuite.length === 0) throw new ParserCrash("IndexError: pop from empty list");
        currentSuite.pop();
        continue;
      }
    }
    if (status === "✔" || status === "✖") {
      map.set([...currentSuite, name].join(" > "), SYMBOL_STATUS[status] as string);
    }
  }
  return map;
};

const TAP = re(`^(ok|not ok) (${D}+) (${DOT}+)$`);

/** TAP: "ok 1 name" / "not ok 2 name". */
export const parseTap: LogParser = (log) => {
  const map: StatusMap = new Map();
  for (const line of log.split("\n")) {
    const m = TAP.exec(pyStrip(line));
    if (m) map.set(m[3] as string, m[1] === "ok" ? TestStatus.PASSED : TestStatus.FAILED);
  }
  return map;
};

/** immutable-js instances use different runners; the official harness picks by PR number. */
export const parseImmutableJs: LogParser = (log, ctx) => {
  const pr = ctx.instance_id.split("-").at(-1);
  if (pr === "2006") return parseJest(log, ctx);
  if (pr === "2005") return parseJestJson(log, ctx);
  throw new ParserCrash(`ValueError: Unknown instance id: ${ctx.instance_id}`);
};

/** MAP_REPO_TO_PARSER_JS. */
export const JAVASCRIPT_PARSERS: Record<string, LogParser> = {
  "Automattic/wp-calypso": parseCalypso,
  "chartjs/Chart.js": parseChartJs,
  "markedjs/marked": parseMarked,
  "processing/p5.js": parseP5js,
  "diegomura/react-pdf": parseReactPdf,
  "babel/babel": parseJest,
  "vuejs/core": parseVitest,
  "facebook/docusaurus": parseJest,
  "immutable-js/immutable-js": parseImmutableJs,
  "mrdoob/three.js": parseTap,
  "preactjs/preact": parseKarma,
  "axios/axios": parseTap,
};
