/**
 * Parsers of repositories outside the conformance folder, on small logs in the format each runner prints.
 * Expected maps are what the official Python parsers return on the same text (insertion order included),
 * quirks and all: pytest's "SKIPPED [1] …" keyed "[1]", TAP names keeping their "- ", etc.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parserForJob } from "../../actors/grader-supervisor/backends/common.js";
import type { GradeJob } from "../../actors/grader-supervisor/backends/types.js";
import { parserForRepo } from "../../grading/index.js";
import { MAP_REPO_TO_PARSER } from "../../grading/parsers/index.js";
import { ansiEscape, ParserCrash, pySplit, pyStrip, universalNewlines } from "../../grading/pycompat.js";
import { specFor } from "../../grading/specs.js";
import { EvalfleetError, ValidationError } from "../../protocol/errors.js";

interface Case {
  repo: string;
  instance_id?: string;
  log: string;
  expected: Array<[string, string]>;
}

const CASES: Case[] = [
  {
    repo: "pallets/flask",
    log: [
      "pytest -rA",
      "============ short test summary info ============",
      "PASSED tests/test_basic.py::test_options_work",
      "PASSED tests/test_basic.py::test_url_mapping[GET]",
      "FAILED tests/test_basic.py::test_session - AssertionError: assert 'a' - 'b'",
      "ERROR tests/test_basic.py::test_setup - RuntimeError",
      "SKIPPED [1] tests/test_async.py:12: need asgiref",
      "XFAIL tests/test_basic.py::test_xfail - known",
      "PASSED",
      "",
    ].join("\n"),
    expected: [
      ["tests/test_basic.py::test_options_work", "PASSED"],
      ["tests/test_basic.py::test_url_mapping[GET]", "PASSED"],
      ["tests/test_basic.py::test_session", "FAILED"],
      ["tests/test_basic.py::test_setup", "ERROR"],
      ["[1]", "SKIPPED"],
      ["tests/test_basic.py::test_xfail", "XFAIL"],
    ],
  },
  {
    repo: "pydicom/pydicom",
    log: [
      "PASSED pydicom/tests/test_filereader.py::test_read[/root/.cache/pydicom/data/CT_small.dcm]",
      "PASSED pydicom/tests/test_x.py::test_y[//server/share]",
      "FAILED pydicom/tests/test_x.py::test_z[/a/b*c] - ValueError",
      "PASSED pydicom/tests/test_x.py::test_plain",
      "",
    ].join("\n"),
    expected: [
      ["pydicom/tests/test_filereader.py::test_read[/CT_small.dcm]", "PASSED"],
      ["pydicom/tests/test_x.py::test_y[//server/share]", "PASSED"],
      ["pydicom/tests/test_x.py::test_z[/a/b*c]", "FAILED"],
      ["pydicom/tests/test_x.py::test_plain", "PASSED"],
    ],
  },
  {
    repo: "scikit-learn/scikit-learn",
    log: [
      "\u001b[32mPASSED\u001b[0m sklearn/tests/test_base.py::\u001b[1mtest_clone\u001b[0m",
      "sklearn/tests/test_base.py::test_repr PASSED",
      "sklearn/tests/test_base.py::test_old\tFAILED",
      "FAILED sklearn/tests/test_base.py::test_pickle - AssertionError",
      "",
    ].join("\n"),
    expected: [
      ["sklearn/tests/test_base.py::test_clone", "PASSED"],
      ["sklearn/tests/test_base.py::test_repr", "PASSED"],
      ["sklearn/tests/test_base.py::test_pickle", "FAILED"],
    ],
  },
  {
    repo: "mwaskom/seaborn",
    log: [
      "tests/test_core.py::TestSemanticMapping::test_call_lookup PASSED [ 10%]",
      "tests/test_core.py::TestHueMapping::test_init FAILED [ 20%]",
      "FAILED tests/test_core.py::TestHueMapping::test_init - AssertionError",
      "PASSED tests/test_core.py::test_summary",
      "",
    ].join("\n"),
    expected: [
      ["tests/test_core.py::TestSemanticMapping::test_call_lookup", "PASSED"],
      ["tests/test_core.py::TestHueMapping::test_init", "FAILED"],
      ["tests/test_core.py::test_summary", "PASSED"],
    ],
  },
  {
    repo: "sympy/sympy",
    log: [
      "test_basic ok",
      "test_matrix F",
      "test_broken E",
      "________________ sympy/core/tests/test_basic.py:test_matrix ________________",
      "",
    ].join("\n"),
    expected: [
      ["sympy/core/tests/test_basic.py:test_matrix", "FAILED"],
      ["test_basic", "PASSED"],
      ["test_matrix", "FAILED"],
      ["test_broken", "ERROR"],
    ],
  },
  {
    repo: "django/django",
    log: [
      "test_a (app.tests.T) ... ok",
      "test_b (app.tests.T) ... FAIL",
      "test_c (app.tests.T) ... ERROR",
      "test_d (app.tests.T) ... skipped 'no db'",
      "test_e (app.tests.T) ... Testing against Django installed in '/x' with up to 1 processes",
      "System check identified no issues (0 silenced).",
      "ok",
      "test_f (app.tests.T) ... System check identified no issues (0 silenced)",
      "ok",
      "FAIL: test_g (app.tests.T)",
      "--version is equivalent to version",
      "",
    ].join("\n"),
    expected: [
      ["test_a (app.tests.T)", "PASSED"],
      ["test_b (app.tests.T)", "FAILED"],
      ["test_c (app.tests.T)", "ERROR"],
      ["test_d (app.tests.T)", "SKIPPED"],
      ["test_e (app.tests.T)", "PASSED"],
      ["test_f (app.tests.T)", "PASSED"],
      ["test_g", "FAILED"],
      ["--version is equivalent to version", "PASSED"],
    ],
  },
  {
    repo: "matplotlib/matplotlib",
    log: [
      "PASSED lib/matplotlib/tests/test_widgets.py::test_click[MouseButton.LEFT]",
      "FAILED lib/matplotlib/tests/test_widgets.py::test_click[MouseButton.RIGHT] - x",
      "",
    ].join("\n"),
    expected: [
      ["lib/matplotlib/tests/test_widgets.py::test_click[1]", "PASSED"],
      ["lib/matplotlib/tests/test_widgets.py::test_click[3]", "FAILED"],
    ],
  },
  {
    repo: "Automattic/wp-calypso",
    instance_id: "Automattic__wp-calypso-21964",
    log: [
      "+ ./node_modules/.bin/jest --verbose -c=test/client/jest.config.js 'client/state/x/test/index.js'",
      " PASS  client/state/x/test/index.js",
      "  reducer",
      "    items",
      "      \u2713 should default to empty (3ms)",
      "      \u2715 should store items (12ms)",
      "    other",
      "      \u2713 works",
      "Test Suites: 1 failed",
      "",
    ].join("\n"),
    expected: [
      ["PASS  client/state/x/test/index.js - reducer - items - should default to empty", "PASSED"],
      ["PASS  client/state/x/test/index.js - reducer - items - should store items", "FAILED"],
      ["PASS  client/state/x/test/index.js - reducer - other - works", "PASSED"],
    ],
  },
  {
    repo: "chartjs/Chart.js",
    log: [
      "Chrome 120.0.0 (Linux x86_64) Chart.controllers.bar should draw FAILED",
      "Chrome 120.0.0 (Linux x86_64) \u001b[31mPlugin.legend\u001b[0m should fit FAILED",
      "Chrome 120.0.0 (Linux x86_64): Executed 10 of 10 (2 FAILED)",
      "",
    ].join("\n"),
    expected: [
      ["Chart.controllers.bar should draw ", "FAILED"],
      ["Plugin.legend should fit ", "FAILED"],
    ],
  },
  {
    repo: "markedjs/marked",
    log: ["  1) should parse tables", "2) Marked code  ", "  passing (2s)", ""].join("\n"),
    expected: [["Marked code", "FAILED"]],
  },
  {
    repo: "processing/p5.js",
    log: [
      "  1) Graphics",
      "       createGraphics",
      "         should not throw:",
      "     Error: boom",
      "  2) Flat:",
      "  {",
      '    "a": 1',
      "  }",
      "",
    ].join("\n"),
    expected: [
      ["Graphics:createGraphics:should not throw", "FAILED"],
      ["Flat", "FAILED"],
    ],
  },
  {
    repo: "diegomura/react-pdf",
    log: [
      "PASS packages/layout/tests/text.test.js (1.2 s)",
      "FAIL packages/renderer/tests/svg.test.js (5.5s)",
      "PASS packages/core/tests/x.test.js (12ms)",
      "FAIL packages/y/tests/z.test.js",
      "",
    ].join("\n"),
    expected: [
      ["packages/layout/tests/text.test.js", "PASSED"],
      ["packages/renderer/tests/svg.test.js", "FAILED"],
      ["packages/core/tests/x.test.js", "PASSED"],
      ["packages/y/tests/z.test.js", "FAILED"],
    ],
  },
  {
    repo: "babel/babel",
    log: [
      "  \u2713 transforms arrow functions (5 ms)",
      "  \u2715 keeps comments (12 ms)",
      "  \u25cb skipped legacy mode",
      "",
    ].join("\n"),
    expected: [
      ["transforms arrow functions", "PASSED"],
      ["keeps comments", "FAILED"],
      ["skipped legacy mode", "SKIPPED"],
    ],
  },
  {
    repo: "facebook/docusaurus",
    log: ["    \u2713 loads config (3 ms)", "    \u2713 handles empty", ""].join("\n"),
    expected: [
      ["loads config", "PASSED"],
      ["handles empty", "PASSED"],
    ],
  },
  {
    repo: "vuejs/core",
    log: [
      " \u2713 packages/runtime-core/__tests__/a.spec.ts > renders 12ms",
      " \u00d7 packages/runtime-core/__tests__/a.spec.ts > patches 3ms",
      " \u2193 packages/runtime-core/__tests__/a.spec.ts > skipped one [skipped]",
      "",
    ].join("\n"),
    expected: [
      ["packages/runtime-core/__tests__/a.spec.ts > renders", "PASSED"],
      ["packages/runtime-core/__tests__/a.spec.ts > patches", "FAILED"],
      ["packages/runtime-core/__tests__/a.spec.ts > skipped one", "SKIPPED"],
    ],
  },
  {
    repo: "immutable-js/immutable-js",
    instance_id: "immutable-js__immutable-js-2005",
    log: ["[PASSED] Map > set works", "[FAILED] List > push", ""].join("\n"),
    expected: [
      ["Map > set works", "PASSED"],
      ["List > push", "FAILED"],
    ],
  },
  {
    repo: "immutable-js/immutable-js",
    instance_id: "immutable-js__immutable-js-2006",
    log: ["  \u2713 Seq reverses (2 ms)", ""].join("\n"),
    expected: [["Seq reverses", "PASSED"]],
  },
  {
    repo: "mrdoob/three.js",
    log: ["ok 1 Vector3 > add", "not ok 2 Matrix4 > invert", "# tests 2", ""].join("\n"),
    expected: [
      ["Vector3 > add", "PASSED"],
      ["Matrix4 > invert", "FAILED"],
    ],
  },
  {
    repo: "axios/axios",
    log: ["TAP version 13", "ok 1 - should post", "not ok 2 - should retry", ""].join("\n"),
    expected: [
      ["- should post", "PASSED"],
      ["- should retry", "FAILED"],
    ],
  },
  {
    repo: "preactjs/preact",
    log: [
      "noise",
      "Chrome: Starting browser Chrome",
      "  hooks",
      "    useState",
      "      \u2714 updates state",
      "      \u2716 batches",
      "    useEffect",
      "      \u2714 runs",
      "SUMMARY:",
      "  \u2714 ignored",
      "",
    ].join("\n"),
    expected: [
      ["hooks > useState > updates state", "PASSED"],
      ["hooks > useState > batches", "FAILED"],
      ["hooks > useState > runs", "PASSED"],
    ],
  },
  {
    repo: "redis/redis",
    log: [
      "[ok]: GETRANGE against string value (2 ms)",
      "[err]: SETRANGE with huge offset in tests/unit/type/string.tcl",
      "[skip]: Big test",
      "[ignore]: Flaky one",
      "",
    ].join("\n"),
    expected: [
      ["GETRANGE against string value", "PASSED"],
      ["SETRANGE with huge offset", "FAILED"],
      ["Big test", "SKIPPED"],
      ["Flaky one", "SKIPPED"],
    ],
  },
  {
    repo: "valkey-io/valkey",
    log: ["[ok]: PING works", ""].join("\n"),
    expected: [["PING works", "PASSED"]],
  },
  {
    repo: "jqlang/jq",
    log: ["PASS: tests/jqtest", "FAIL: tests/mantest", ""].join("\n"),
    expected: [
      ["tests/jqtest", "PASSED"],
      ["tests/mantest", "FAILED"],
    ],
  },
  {
    repo: "nlohmann/json",
    log: [
      'noise <doctest binary="test">',
      "<TestSuite>",
      '<TestCase name="parse" filename="a.cpp" line="1">',
      '<SubCase name="numbers &amp; strings" filename="a.cpp" line="2">',
      '<Expression success="true" type="CHECK"><Original>x</Original></Expression>',
      "</SubCase>",
      '<SubCase name="bad"><Expression success="false" type="CHECK"/></SubCase>',
      '<SubCase name="empty"/>',
      "</TestCase>",
      "</TestSuite>",
      "</doctest> trailer",
      "",
    ].join("\n"),
    expected: [
      ["parse > numbers & strings", "PASSED"],
      ["parse > bad", "FAILED"],
      ["parse > empty", "PASSED"],
    ],
  },
  {
    repo: "micropython/micropython",
    log: ["pass  basics/int.py", "FAIL  basics/str.py", "skip  extmod/ssl.py", ""].join("\n"),
    expected: [
      ["basics/int.py", "PASSED"],
      ["basics/str.py", "FAILED"],
      ["extmod/ssl.py", "SKIPPED"],
    ],
  },
  {
    repo: "fmtlib/fmt",
    log: ["[       OK ] format_test.named_arg (0 ms)", "[  FAILED  ] format_test.precision (1 ms)", ""].join(
      "\n",
    ),
    expected: [
      ["format_test.named_arg", "PASSED"],
      ["format_test.precision", "FAILED"],
    ],
  },
  {
    repo: "gin-gonic/gin",
    log: [
      "=== RUN   TestRouter",
      "--- PASS: TestRouter (0.00s)",
      "    --- FAIL: TestRouter/sub_case (0.01s)",
      "--- SKIP: TestSlow (0.00s)",
      "",
    ].join("\n"),
    expected: [
      ["TestRouter", "PASSED"],
      ["TestRouter/sub_case", "FAILED"],
      ["TestSlow", "SKIPPED"],
    ],
  },
  {
    repo: "google/gson",
    log: [
      "+ mvnd test -B -T 1C -pl gson -Dtest=com.google.gson.functional.PrimitiveTest#testByteSerialization",
      "[INFO] BUILD SUCCESS",
      "+ mvnd test -B -pl gson -Dtest=com.google.gson.A#b",
      "[INFO] BUILD FAILURE",
      "",
    ].join("\n"),
    expected: [
      ["com.google.gson.functional.PrimitiveTest#testByteSerialization", "PASSED"],
      ["com.google.gson.A#b", "FAILED"],
    ],
  },
  {
    repo: "projectlombok/lombok",
    log: [
      "    [junit] [PASS] testGetter",
      "    [junit] [FAIL] testSetter",
      "    [junit] [ERR] testBuilder",
      "",
    ].join("\n"),
    expected: [
      ["testGetter", "PASSED"],
      ["testSetter", "FAILED"],
      ["testBuilder", "FAILED"],
    ],
  },
  {
    repo: "apache/lucene",
    log: [
      "org.apache.lucene.TestX > testA PASSED",
      "org.apache.lucene.TestX > testB FAILED",
      "> Task :test",
      "",
    ].join("\n"),
    expected: [
      ["org.apache.lucene.TestX > testA", "PASSED"],
      ["org.apache.lucene.TestX > testB", "FAILED"],
    ],
  },
  {
    repo: "laravel/framework",
    log: [
      "Support Str (Illuminate\\Tests\\Support\\SupportStr)",
      " \u2714 Slug works",
      " \u2718 Snake fails",
      " \u21a9 Skipped one",
      "",
    ].join("\n"),
    expected: [
      ["Support Str > Slug works", "PASSED"],
      ["Support Str > Snake fails", "FAILED"],
      ["Support Str > Skipped one", "SKIPPED"],
    ],
  },
  {
    repo: "jekyll/jekyll",
    instance_id: "jekyll__jekyll-9141",
    log: [
      "TestSite#test_render = 0.01 s = .",
      "TestSite#test_ok. = 0.01 s = .",
      "TestSite#test_bad. = 0.02 s = F",
      "",
    ].join("\n"),
    expected: [
      ["TestSite#test_ok", "PASSED"],
      ["TestSite#test_bad", "FAILED"],
    ],
  },
  {
    repo: "jekyll/jekyll",
    instance_id: "jekyll__jekyll-8761",
    log: ["Feature: rendering ....F", "Scenario ...", ""].join("\n"),
    expected: [
      ["Feature: rendering", "FAILED"],
      ["Scenario", "PASSED"],
    ],
  },
  {
    repo: "fluent/fluentd",
    log: ["test: emit records:  .: (0.01)", "buffer chunk: F", "skip case: O", ""].join("\n"),
    expected: [
      ["emit records", "PASSED"],
      ["buffer chunk", "FAILED"],
      ["skip case", "SKIPPED"],
    ],
  },
  {
    repo: "rubocop/rubocop",
    log: ["RuboCop::Cop::Style works - passed", "RuboCop::Cop::Layout breaks - failed", ""].join("\n"),
    expected: [
      ["RuboCop::Cop::Style works", "PASSED"],
      ["RuboCop::Cop::Layout breaks", "FAILED"],
    ],
  },
  {
    repo: "burntsushi/ripgrep",
    log: [
      "test regression::r1 ... ok",
      "test feature::f2 ... FAILED",
      "test misc::ignored ... ignored",
      "",
    ].join("\n"),
    expected: [
      ["regression::r1", "PASSED"],
      ["feature::f2", "FAILED"],
    ],
  },
];

describe("official log parsers on each runner's output", () => {
  for (const c of CASES) {
    it(`${c.repo}${c.instance_id ? ` (${c.instance_id})` : ""}`, () => {
      const parser = MAP_REPO_TO_PARSER[c.repo];
      assert.ok(parser, c.repo);
      const map = parser(c.log, { instance_id: c.instance_id ?? "x__y-1" });
      assert.deepEqual([...map.entries()], c.expected);
    });
  }
});

describe("the full official parser map", () => {
  it("covers every repository of MAP_REPO_TO_PARSER (swebench v4.1)", () => {
    const official = [
      "redis/redis",
      "jqlang/jq",
      "nlohmann/json",
      "micropython/micropython",
      "valkey-io/valkey",
      "fmtlib/fmt",
      "caddyserver/caddy",
      "hashicorp/terraform",
      "prometheus/prometheus",
      "gohugoio/hugo",
      "gin-gonic/gin",
      "google/gson",
      "apache/druid",
      "javaparser/javaparser",
      "projectlombok/lombok",
      "apache/lucene",
      "reactivex/rxjava",
      "Automattic/wp-calypso",
      "chartjs/Chart.js",
      "markedjs/marked",
      "processing/p5.js",
      "diegomura/react-pdf",
      "babel/babel",
      "vuejs/core",
      "facebook/docusaurus",
      "immutable-js/immutable-js",
      "mrdoob/three.js",
      "preactjs/preact",
      "axios/axios",
      "phpoffice/phpspreadsheet",
      "laravel/framework",
      "php-cs-fixer/php-cs-fixer",
      "briannesbitt/carbon",
      "astropy/astropy",
      "django/django",
      "marshmallow-code/marshmallow",
      "matplotlib/matplotlib",
      "mwaskom/seaborn",
      "pallets/flask",
      "psf/requests",
      "pvlib/pvlib-python",
      "pydata/xarray",
      "pydicom/pydicom",
      "pylint-dev/astroid",
      "pylint-dev/pylint",
      "pytest-dev/pytest",
      "pyvista/pyvista",
      "scikit-learn/scikit-learn",
      "sqlfluff/sqlfluff",
      "sphinx-doc/sphinx",
      "sympy/sympy",
      "jekyll/jekyll",
      "fluent/fluentd",
      "fastlane/fastlane",
      "jordansissel/fpm",
      "faker-ruby/faker",
      "rubocop/rubocop",
      "burntsushi/ripgrep",
      "sharkdp/bat",
      "astral-sh/ruff",
      "tokio-rs/tokio",
      "uutils/coreutils",
      "nushell/nushell",
      "tokio-rs/axum",
    ];
    assert.deepEqual(Object.keys(MAP_REPO_TO_PARSER).sort(), [...official].sort());
  });
});

describe("where the official parser raises, so do we (the harness then records an error)", () => {
  const crash =
    (repo: string, log: string, id = "x__y-1") =>
    () =>
      MAP_REPO_TO_PARSER[repo]?.(log, { instance_id: id });
  it("immutable-js and jekyll pick a runner by PR number", () => {
    assert.throws(crash("immutable-js/immutable-js", "", "immutable-js__immutable-js-1"), ParserCrash);
    assert.throws(crash("jekyll/jekyll", "", "jekyll__jekyll-1"), ParserCrash);
  });
  it("seaborn indexes a lone FAILED", () => {
    assert.throws(crash("mwaskom/seaborn", "FAILED"), ParserCrash);
  });
  it("doctest XML without its closing tag", () => {
    assert.throws(crash("nlohmann/json", "<doctest><TestCase/>"), ParserCrash);
  });
});

describe("names a log, a repo or a log_format may hold that are JavaScript object properties", () => {
  it("are what they are in Python: unknown (an undefined entity, no parser, no specs)", () => {
    const doctest = `<doctest><TestSuite><TestCase name="a&constructor;" filename="f"><Expression success="true"/></TestCase></TestSuite></doctest>`;
    assert.throws(() => MAP_REPO_TO_PARSER["nlohmann/json"]?.(doctest, { instance_id: "x" }), ParserCrash);
    for (const name of ["constructor", "__proto__", "toString"]) {
      const job = {
        instance: { instance_id: "x", repo: name },
        logFormat: name,
        patch: "",
      } as unknown as GradeJob;
      assert.throws(() => parserForJob(job), ValidationError);
      assert.throws(
        () => specFor(name, "1"),
        (e: unknown) => e instanceof EvalfleetError,
      );
      assert.throws(
        () => parserForRepo(name),
        (e: unknown) => e instanceof EvalfleetError,
      );
    }
  });
});

describe("Python string semantics", () => {
  it("split/strip treat \\x1c-\\x1f, \\x85 and NBSP as whitespace", () => {
    assert.deepEqual(pySplit("a\x1cb\x85c\u00a0d  e"), ["a", "b", "c", "d", "e"]);
    assert.equal(pyStrip("\x1f x \u3000"), "x");
  });
  it("universal newlines: \\r\\n and lone \\r become \\n", () => {
    assert.equal(universalNewlines("a\r\nb\rc\n"), "a\nb\nc\n");
  });
  it("ansi_escape removes CSI and Fe sequences only, as the official regex", () => {
    assert.equal(ansiEscape("\x1b[31mred\x1b[0m \x1b(B \x1b\\"), "red \x1b(B ");
  });
});
