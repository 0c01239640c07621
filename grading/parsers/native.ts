/**
 * Parsers of SWE-bench Multilingual repositories (C/C++, Go, Java, PHP, Ruby, Rust) from
 * swebench/harness/log_parsers/{c,go,java,php,ruby,rust}.py.
 */
import { TestStatus } from "../constants.js";
import { DOT, NS, ParserCrash, pyStrip, re, S, W, WB_AFTER_WORD } from "../pycompat.js";
import type { LogParser, StatusMap } from "./types.js";
import { findAllDescendants, parseXml } from "./xml.js";

/**
 * The shape most multilingual parsers share: match each stripped line against one pattern and map a
 * captured outcome to a status. Unknown outcomes are ignored, as in the official if/elif chains.
 */
function lineParser(
  pattern: RegExp,
  pick: (m: RegExpExecArray) => { name: string; outcome: string },
  outcomes: Record<string, string>,
  strip = true,
): LogParser {
  return (log) => {
    const map: StatusMap = new Map();
    for (const raw of log.split("\n")) {
      const m = pattern.exec(strip ? pyStrip(raw) : raw);
      if (!m) continue;
      const { name, outcome } = pick(m);
      const status = outcomes[outcome];
      if (status !== undefined) map.set(name, status);
    }
    return map;
  };
}

const P = TestStatus.PASSED;
const F = TestStatus.FAILED;
const SK = TestStatus.SKIPPED;

// --- C / C++ ---
const REDIS = re(`^\\[(ok|err|skip|ignore)\\]:${S}(${DOT}+?)(?:${S}\\((\\p{Nd}+${S}*m?s)\\))?$`);
const REDIS_FILE_SUFFIX = re(`${S}+in${S}+${NS}+$`);

/** redis/valkey test runner: "[ok]: name (12 ms)"; failure names lose their "in file" suffix. */
export const parseRedis: LogParser = (log) => {
  const map: StatusMap = new Map();
  for (const raw of log.split("\n")) {
    const m = REDIS.exec(pyStrip(raw));
    if (!m) continue;
    const outcome = m[1] as string;
    const name = m[2] as string;
    if (outcome === "ok") map.set(name, P);
    else if (outcome === "err") map.set(name.replace(REDIS_FILE_SUFFIX, ""), F);
    else map.set(name, SK);
  }
  return map;
};

/** jq: "PASS: name" / "FAIL: name". */
export const parseJq = lineParser(
  re(`^${S}*(PASS|FAIL):${S}(${DOT}+)$`),
  (m) => ({ outcome: m[1] as string, name: m[2] as string }),
  { PASS: P, FAIL: F },
);

/** nlohmann/json: doctest `-s -r=xml`; a subcase passes when all its expressions succeeded. */
export const parseDoctest: LogParser = (log) => {
  const map: StatusMap = new Map();
  const start = log.indexOf("<doctest");
  if (start === -1) return map;
  const endTag = "</doctest>";
  const found = log.indexOf(endTag, start);
  // Python computes find()+len(tag) unguarded: a missing end tag slices garbage and ET raises.
  const end = found + endTag.length;
  if (found === -1) throw new ParserCrash("ParseError: doctest XML has no closing tag");
  const root = parseXml(log.slice(start, end));
  for (const testCase of findAllDescendants(root, "TestCase")) {
    const caseName = testCase.attrs.get("name") ?? "None";
    for (const sub of findAllDescendants(testCase, "SubCase")) {
      const name = `${caseName} > ${sub.attrs.get("name") ?? "None"}`;
      const ok = findAllDescendants(sub, "Expression").every((e) => e.attrs.get("success") === "true");
      map.set(name, ok ? P : F);
    }
  }
  return map;
};

/** micropython run-tests: "pass name" / "FAIL name" / "skip name". */
export const parseMicropython = lineParser(
  re(`^(pass|FAIL|skip)${S}+(${DOT}+)$`),
  (m) => ({ outcome: m[1] as string, name: m[2] as string }),
  { pass: P, FAIL: F, skip: SK },
);

/** googletest: "[       OK ] Suite.Name (0 ms)". */
export const parseGoogletest = lineParser(
  re(`^${DOT}*\\[${S}*(OK|FAILED)${S}*\\]${S}(${DOT}*)${S}\\(${DOT}*\\)$`),
  (m) => ({ outcome: m[1] as string, name: m[2] as string }),
  { OK: P, FAILED: F },
);

// --- Go ---
/** go test -v: "--- PASS: TestName (0.00s)". */
export const parseGoTest = lineParser(
  re(`^--- (PASS|FAIL|SKIP): (${DOT}+) \\((${DOT}+)\\)$`),
  (m) => ({ outcome: m[1] as string, name: m[2] as string }),
  { PASS: P, FAIL: F, SKIP: SK },
);

// --- Java ---
const MAVEN_TEST_NAME = re(`^${DOT}*-Dtest=(${NS}+)${DOT}*$`);
const MAVEN_RESULT = re(`^${DOT}*BUILD (SUCCESS|FAILURE)$`);

/** Maven runs one test per command; the name comes from the traced `-Dtest=` and the verdict from BUILD. */
export const parseMaven: LogParser = (log) => {
  const map: StatusMap = new Map();
  let current = "---NO TEST NAME FOUND YET---";
  for (const raw of log.split("\n")) {
    const line = pyStrip(raw);
    const name = MAVEN_TEST_NAME.exec(line);
    if (name) current = name[1] as string;
    const result = MAVEN_RESULT.exec(line);
    if (result) map.set(current, result[1] === "SUCCESS" ? P : F);
  }
  return map;
};

/** ant junit: "[junit] [PASS] name". */
export const parseAnt = lineParser(
  re(`^${S}*\\[junit\\]${S}+\\[(PASS|FAIL|ERR)\\]${S}+(${DOT}*)$`),
  (m) => ({ outcome: m[1] as string, name: m[2] as string }),
  { PASS: P, FAIL: F, ERR: F },
);

/** gradle with the harness's test logging config: "name PASSED". */
export const parseGradleCustom = lineParser(
  re(`^([^>]${DOT}+)${S}+(PASSED|FAILED)$`),
  (m) => ({ outcome: m[2] as string, name: m[1] as string }),
  { PASSED: P, FAILED: F },
);

// --- PHP ---
const PHPUNIT_SUITE = re(`^(${W}${DOT}+) \\(${DOT}+\\)$`);
const PHPUNIT_TEST = re(`^${S}*([✔✘↩])${S}*(${DOT}*)$`);
const PHPUNIT_STATUS: Record<string, string> = { "✔": P, "✘": F, "↩": SK };

/** phpunit --testdox: "Suite (Class)" headers then "✔ test name". */
export const parsePhpunit: LogParser = (log) => {
  const map: StatusMap = new Map();
  let suite = "None";
  for (const line of log.split("\n")) {
    const s = PHPUNIT_SUITE.exec(line);
    if (s) {
      suite = s[1] as string;
      continue;
    }
    const t = PHPUNIT_TEST.exec(line);
    if (t) map.set(`${suite} > ${t[2]}`, PHPUNIT_STATUS[t[1] as string] as string);
  }
  return map;
};

// --- Ruby ---
/** minitest verbose: "Class#test_name = 0.00 s = .". */
export const parseMinitest = lineParser(
  re(`^(${DOT}+)\\. ${DOT}*=${DOT}*(\\.|F|E)${DOT}*$`),
  (m) => ({ outcome: m[2] as string, name: m[1] as string }),
  { ".": P, F: F, E: F },
);

/** cucumber --format progress. */
export const parseCucumber = lineParser(
  re(`^(${DOT}*) \\.+(\\.|F)`),
  (m) => ({ outcome: m[2] as string, name: m[1] as string }),
  { ".": P, F: F },
);

/** test-unit verbose: "test: name: .". */
export const parseRubyUnit = lineParser(
  re(`^${S}*(?:test: )?(${DOT}+):${S}+(\\.|E${WB_AFTER_WORD}|F${WB_AFTER_WORD}|O${WB_AFTER_WORD})`),
  (m) => ({ outcome: m[2] as string, name: m[1] as string }),
  { ".": P, E: F, F: F, O: SK },
);

/** rspec JSON transformed by the harness to "name - passed". */
export const parseRspecTransformedJson = lineParser(
  re(`^(${DOT}+) - (passed|failed)`),
  (m) => ({ outcome: m[2] as string, name: m[1] as string }),
  { passed: P, failed: F },
);

/** jekyll instances use different runners; the official harness picks by PR number. */
export const parseJekyll: LogParser = (log, ctx) => {
  const pr = ctx.instance_id.split("-")[1];
  if (pr === "9141" || pr === "8047" || pr === "8167") return parseMinitest(log, ctx);
  if (pr === "8761" || pr === "8771") return parseCucumber(log, ctx);
  throw new ParserCrash(`ValueError: Unknown instance id: ${ctx.instance_id}`);
};

// --- Rust ---
/** cargo test: "test path::name ... ok". */
export const parseCargo = lineParser(
  re(`^test${S}+(${NS}+)${S}+\\.\\.\\.${S}+(${W}+)$`),
  (m) => ({ outcome: m[2] as string, name: m[1] as string }),
  { ok: P, FAILED: F },
);

/** MAP_REPO_TO_PARSER for C, Go, Java, PHP, Ruby and Rust. */
export const NATIVE_PARSERS: Record<string, LogParser> = {
  "redis/redis": parseRedis,
  "jqlang/jq": parseJq,
  "nlohmann/json": parseDoctest,
  "micropython/micropython": parseMicropython,
  "valkey-io/valkey": parseRedis,
  "fmtlib/fmt": parseGoogletest,
  "caddyserver/caddy": parseGoTest,
  "hashicorp/terraform": parseGoTest,
  "prometheus/prometheus": parseGoTest,
  "gohugoio/hugo": parseGoTest,
  "gin-gonic/gin": parseGoTest,
  "google/gson": parseMaven,
  "apache/druid": parseMaven,
  "javaparser/javaparser": parseMaven,
  "projectlombok/lombok": parseAnt,
  "apache/lucene": parseGradleCustom,
  "reactivex/rxjava": parseGradleCustom,
  "phpoffice/phpspreadsheet": parsePhpunit,
  "laravel/framework": parsePhpunit,
  "php-cs-fixer/php-cs-fixer": parsePhpunit,
  "briannesbitt/carbon": parsePhpunit,
  "jekyll/jekyll": parseJekyll,
  "fluent/fluentd": parseRubyUnit,
  "fastlane/fastlane": parseRspecTransformedJson,
  "jordansissel/fpm": parseRspecTransformedJson,
  "faker-ruby/faker": parseRubyUnit,
  "rubocop/rubocop": parseRspecTransformedJson,
  "burntsushi/ripgrep": parseCargo,
  "sharkdp/bat": parseCargo,
  "astral-sh/ruff": parseCargo,
  "tokio-rs/tokio": parseCargo,
  "uutils/coreutils": parseCargo,
  "nushell/nushell": parseCargo,
  "tokio-rs/axum": parseCargo,
};
