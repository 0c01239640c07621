/** Python-repository parsers of swebench/harness/log_parsers/python.py. */
import { TEST_STATUS_VALUES, TestStatus } from "../constants.js";
import {
  at,
  BOL,
  D,
  DOT,
  EOL,
  endsWithAny,
  pyLstrip,
  pySplit,
  pyStrip,
  re,
  rsplitFirst,
  S,
  startsWithAny,
} from "../pycompat.js";
import type { LogParser, StatusMap } from "./types.js";

/** The `[status, test id]` of each pytest `-rA` short-summary line: "<STATUS> <test id>[ - message]". */
function* pytestSummary(log: string): Generator<[status: string, id: string]> {
  for (let line of log.split("\n")) {
    if (!startsWithAny(line, TEST_STATUS_VALUES)) continue;
    if (line.startsWith(TestStatus.FAILED)) line = line.replaceAll(" - ", " ");
    const parts = pySplit(line);
    if (parts.length <= 1) continue;
    yield [parts[0] as string, parts[1] as string];
  }
}

/** pytest `-rA` short summary: "<STATUS> <test id>[ - message]". */
export const parsePytest: LogParser = (log) => {
  const map: StatusMap = new Map();
  for (const [status, id] of pytestSummary(log)) map.set(id, status);
  return map;
};

const OPTION = re(`^(${DOT}*?)\\[(${DOT}*)\\]`);

/** pytest with parametrised ids whose option is an absolute path: keep only its last component. */
export const parsePytestOptions: LogParser = (log) => {
  const map: StatusMap = new Map();
  for (const [status, id] of pytestSummary(log)) {
    // Python's `re.search` here is unanchored but `(.*?)` from position 0 always succeeds first.
    const m = OPTION.exec(id);
    let name = id;
    if (m) {
      const main = m[1] as string;
      let option = m[2] as string;
      if (option.startsWith("/") && !option.startsWith("//") && !option.includes("*")) {
        option = `/${option.split("/").at(-1)}`;
      }
      name = `${main}[${option}]`;
    }
    map.set(name, status);
  }
  return map;
};

const DJANGO_PASS_SUFFIXES = [" ... ok", " ... OK", " ...  OK"];
// Django's runner sometimes interleaves a multi-line print between "..." and "ok"; these three shapes
// are recovered from the whole log.
const DJANGO_MULTILINE = [
  re(
    `${BOL}(${DOT}*?)${S}\\.\\.\\.${S}Testing against Django installed in ([^]*?) silenced\\)\\.\\nok${EOL}`,
    "g",
  ),
  re(`${BOL}(${DOT}*?)${S}\\.\\.\\.${S}Internal Server Error: \\/(${DOT}*)\\/\\nok${EOL}`, "g"),
  re(`${BOL}(${DOT}*?)${S}\\.\\.\\.${S}System check identified no issues \\(0 silenced\\)\\nok${EOL}`, "g"),
];

/** Django's own runner at --verbosity 2: "test_x (module.Class) ... ok". */
export const parseDjango: LogParser = (log) => {
  const map: StatusMap = new Map();
  let prevTest: string | null = null;
  for (const raw of log.split("\n")) {
    let line = pyStrip(raw);
    if (line.includes("--version is equivalent to version")) {
      map.set("--version is equivalent to version", TestStatus.PASSED);
    }
    if (line.includes(" ... ")) prevTest = line.split(" ... ")[0] as string;
    for (const suffix of DJANGO_PASS_SUFFIXES) {
      if (line.endsWith(suffix)) {
        // Official special case for django__django-7188 (migration output on the same line).
        if (pyStrip(line).startsWith("Applying sites.0002_alter_domain_unique...test_no_migrations")) {
          const dots = line.indexOf("...");
          line = pyStrip(dots === -1 ? line : line.slice(dots + 3));
        }
        map.set(rsplitFirst(line, suffix), TestStatus.PASSED);
        break;
      }
    }
    if (line.includes(" ... skipped")) map.set(line.split(" ... skipped")[0] as string, TestStatus.SKIPPED);
    if (line.endsWith(" ... FAIL")) map.set(line.split(" ... FAIL")[0] as string, TestStatus.FAILED);
    if (line.startsWith("FAIL:")) map.set(pyStrip(at(pySplit(line), 1, "FAIL: line")), TestStatus.FAILED);
    if (line.endsWith(" ... ERROR")) map.set(line.split(" ... ERROR")[0] as string, TestStatus.ERROR);
    if (line.startsWith("ERROR:")) map.set(pyStrip(at(pySplit(line), 1, "ERROR: line")), TestStatus.ERROR);
    if (pyLstrip(line).startsWith("ok") && prevTest !== null) map.set(prevTest, TestStatus.PASSED);
  }
  for (const pattern of DJANGO_MULTILINE) {
    for (const m of log.matchAll(pattern)) map.set(m[1] as string, TestStatus.PASSED);
  }
  return map;
};

const ANSI_COLOUR = re(`\\[(${D}+)m`, "g");
// Python's str.maketrans over chr(1)..chr(31): drops tabs and escapes alike.
const CONTROL_CHARS = /[\x01-\x1f]/g;

/** Later pytest (astropy, scikit-learn, sphinx): colour codes stripped, and "<id> STATUS" also accepted. */
export const parsePytestV2: LogParser = (log) => {
  const map: StatusMap = new Map();
  for (const raw of log.split("\n")) {
    let line = raw.replace(ANSI_COLOUR, "").replace(CONTROL_CHARS, "");
    if (startsWithAny(line, TEST_STATUS_VALUES)) {
      if (line.startsWith(TestStatus.FAILED)) line = line.replaceAll(" - ", " ");
      const parts = pySplit(line);
      if (parts.length >= 2) map.set(parts[1] as string, parts[0] as string);
    } else if (endsWithAny(line, TEST_STATUS_VALUES)) {
      const parts = pySplit(line);
      if (parts.length >= 2) map.set(parts[0] as string, parts[1] as string);
    }
  }
  return map;
};

/** seaborn: summary lines plus verbose "id PASSED" lines. */
export const parseSeaborn: LogParser = (log) => {
  const map: StatusMap = new Map();
  for (const line of log.split("\n")) {
    if (line.startsWith(TestStatus.FAILED)) {
      map.set(at(pySplit(line), 1, "seaborn FAILED line"), TestStatus.FAILED);
    } else if (line.includes(` ${TestStatus.PASSED} `)) {
      const parts = pySplit(line);
      if (at(parts, 1, "seaborn PASSED line") === TestStatus.PASSED)
        map.set(parts[0] as string, TestStatus.PASSED);
    } else if (line.startsWith(TestStatus.PASSED)) {
      map.set(at(pySplit(line), 1, "seaborn PASSED line"), TestStatus.PASSED);
    }
  }
  return map;
};

const SYMPY_FAILURE_HEADER = re(`(_*) (${DOT}*)\\.py:(${DOT}*) (_*)`, "g");

/** sympy's bin/test: "test_name ok|F|E", with failure headers "____ path.py:test ____". */
export const parseSympy: LogParser = (log) => {
  const map: StatusMap = new Map();
  for (const m of log.matchAll(SYMPY_FAILURE_HEADER)) map.set(`${m[2]}.py:${m[3]}`, TestStatus.FAILED);
  for (const raw of log.split("\n")) {
    const line = pyStrip(raw);
    if (!line.startsWith("test_")) continue;
    if (line.endsWith(" E")) map.set(pySplit(line)[0] as string, TestStatus.ERROR);
    if (line.endsWith(" F")) map.set(pySplit(line)[0] as string, TestStatus.FAILED);
    if (line.endsWith(" ok")) map.set(pySplit(line)[0] as string, TestStatus.PASSED);
  }
  return map;
};

/** matplotlib: pytest, with MouseButton enum reprs normalised to the ids the dataset uses. */
export const parseMatplotlib: LogParser = (log, ctx) =>
  parsePytest(log.replaceAll("MouseButton.LEFT", "1").replaceAll("MouseButton.RIGHT", "3"), ctx);

/** MAP_REPO_TO_PARSER_PY. */
export const PYTHON_PARSERS: Record<string, LogParser> = {
  "astropy/astropy": parsePytestV2,
  "django/django": parseDjango,
  "marshmallow-code/marshmallow": parsePytest,
  "matplotlib/matplotlib": parseMatplotlib,
  "mwaskom/seaborn": parseSeaborn,
  "pallets/flask": parsePytest,
  "psf/requests": parsePytestOptions,
  "pvlib/pvlib-python": parsePytest,
  "pydata/xarray": parsePytest,
  "pydicom/pydicom": parsePytestOptions,
  "pylint-dev/astroid": parsePytest,
  "pylint-dev/pylint": parsePytestOptions,
  "pytest-dev/pytest": parsePytest,
  "pyvista/pyvista": parsePytest,
  "scikit-learn/scikit-learn": parsePytestV2,
  "sqlfluff/sqlfluff": parsePytest,
  "sphinx-doc/sphinx": parsePytestV2,
  "sympy/sympy": parseSympy,
};
