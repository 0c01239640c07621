/** Eval-script generation: reproduces the official eval.sh of every conformance case, plus other flavours. */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { modifiedFiles, testDirectives } from "../../grading/diff.js";
import { makeEvalScript, makeEvalScriptList } from "../../grading/eval-script.js";
import { parseGradingInstance } from "../../grading/instance.js";
import { MAP_REPO_TO_PARSER } from "../../grading/parsers/index.js";
import { specFor, specRepos, specVersions } from "../../grading/specs.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const casesDir = path.resolve(repoRoot, "../shared/conformance/swebench/cases");
const manifest: { cases: { case_dir: string }[] } = JSON.parse(
  readFileSync(path.join(casesDir, "manifest.json"), "utf8"),
);

describe("eval script matches the official eval.sh", () => {
  for (const c of manifest.cases) {
    it(c.case_dir, () => {
      const dir = path.join(casesDir, c.case_dir);
      const instance = parseGradingInstance(
        JSON.parse(readFileSync(path.join(dir, "instance.json"), "utf8")),
      );
      assert.equal(makeEvalScript(instance), readFileSync(path.join(dir, "eval.sh"), "utf8"));
    });
  }
  it("the special xarray case (log stops before tests) too", () => {
    const dir = path.join(casesDir, "_special/pydata__xarray-6992__vexp-swebench-1774184993333");
    const jsonl = readFileSync(
      path.resolve(casesDir, "../instances/swe-bench-verified-100__vexp.jsonl"),
      "utf8",
    );
    const record = jsonl
      .split("\n")
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l))
      .find((r) => r.instance_id === "pydata__xarray-6992");
    assert.ok(record);
    assert.equal(
      makeEvalScript(parseGradingInstance(record)),
      readFileSync(path.join(dir, "eval.sh"), "utf8"),
    );
  });
});

describe("spec map", () => {
  it("every repository with a parser has a test command for each version", () => {
    for (const repo of Object.keys(MAP_REPO_TO_PARSER)) {
      assert.ok(specRepos().includes(repo), repo);
    }
    for (const repo of specRepos()) {
      if (repo === "dbt-labs/dbt-core") continue; // the official map gives it no test_cmd
      assert.ok(specFor(repo, specVersions(repo)[0] ?? null).testCmd, repo);
    }
  });
  it("knows the official commands", () => {
    assert.equal(
      specFor("sympy/sympy", "1.1").testCmd,
      "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose",
    );
    assert.equal(specFor("django/django", "1.9").testCmd, "./tests/runtests.py --verbosity 2");
    assert.equal(specFor("sphinx-doc/sphinx", "7.2").testCmd, "tox --current-env -epy39 -v --");
  });
  it("an unknown version says which exist", () => {
    assert.throws(() => specFor("psf/requests", "99.9"), /needs one of: .*2\.0/);
  });
});

describe("non-python flavours", () => {
  const testPatch = [
    "diff --git a/src/lib.rs b/src/lib.rs",
    "--- a/src/lib.rs",
    "+++ b/src/lib.rs",
    "@@ -1,2 +1,2 @@",
    " a",
    "--- removed line that looks like a header",
    "+b",
    "diff --git a/tests/new.rs b/tests/new.rs",
    "new file mode 100644",
    "--- /dev/null",
    "+++ b/tests/new.rs",
    "@@ -0,0 +1 @@",
    "+x",
  ].join("\n");

  it("modified files skip new files and hunk bodies", () => {
    assert.deepEqual(modifiedFiles(testPatch), ["src/lib.rs"]);
  });

  it("common flavour: --reject apply, build steps, list of test commands", () => {
    const list = makeEvalScriptList({
      instance_id: "redis__redis-9733",
      repo: "redis/redis",
      version: "9733",
      FAIL_TO_PASS: [],
      PASS_TO_PASS: [],
      base_commit: "abc",
      test_patch: testPatch,
    });
    assert.equal(list[3], "git checkout abc src/lib.rs");
    assert.match(list[4] as string, /^git apply --verbose --reject - <<'EOF_114329324912'\n/);
    assert.deepEqual(list.slice(5), [
      "make distclean",
      "make",
      ": '>>>>> Start Test Output'",
      "TERM=dumb ./runtest --durable --single unit/introspection-2",
      ": '>>>>> End Test Output'",
      "git checkout abc src/lib.rs",
    ]);
  });

  it("js flavour downloads image assets after the reset; calypso gets per-file jest commands", () => {
    const list = makeEvalScriptList({
      instance_id: "Automattic__wp-calypso-1",
      repo: "Automattic/wp-calypso",
      version: "10.10.0",
      FAIL_TO_PASS: [],
      PASS_TO_PASS: [],
      base_commit: "abc",
      test_patch:
        "diff --git a/client/x/test/a.js b/client/x/test/a.js\n--- a/client/x/test/a.js\n+++ b/client/x/test/a.js\n@@ -1 +1 @@\n-a\n+b\n",
      image_assets: JSON.stringify({ test_patch: [{ path: "client/img/p.png", url: "https://e.x/p.png" }] }),
    });
    assert.deepEqual(list.slice(4, 7), [
      "mkdir -p client/img",
      "curl -o client/img/p.png https://e.x/p.png",
      "chmod 777 client/img/p.png",
    ]);
    const start = list.indexOf(": '>>>>> Start Test Output'");
    assert.equal(
      list[start + 1],
      "./node_modules/.bin/jest --verbose -c=test/client/jest.config.js 'client/x/test/a.js'",
    );
  });

  it("django directives are dotted module labels", () => {
    const p =
      "diff --git a/tests/admin_views/tests.py b/tests/admin_views/tests.py\ndiff --git a/tests/x/data.json b/tests/x/data.json\n";
    assert.deepEqual(testDirectives("django/django", p), ["admin_views.tests"]);
  });

  it("missing version or base commit is a validation error", () => {
    assert.throws(
      () =>
        makeEvalScriptList({
          instance_id: "x",
          repo: "psf/requests",
          version: null,
          FAIL_TO_PASS: [],
          PASS_TO_PASS: [],
        }),
      /cannot build the eval script/,
    );
  });
});
