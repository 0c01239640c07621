/** The local backend on a tiny git repository: a failing test, a fix, and the official flow around them. */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, beforeEach, describe, it } from "node:test";
import { createGrader } from "../../actors/grader-supervisor/backends/grader.js";
import { createLocalBackend } from "../../actors/grader-supervisor/backends/local.js";
import type { GradeJob } from "../../actors/grader-supervisor/backends/types.js";
import type { GradingInstance } from "../../grading/index.js";
import type { EvalfleetError } from "../../protocol/errors.js";

let dir: string;
let base: string;
let testPatch: string;
let fixPatch: string;

function git(...args: string[]): string {
  return execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@e.x", ...args], {
    cwd: dir,
    encoding: "utf8",
  });
}

const MATH = "export const add = (a, b) => a - b;\nexport const mul = (a, b) => a * b;\n";
const TEST_HEAD =
  'import test from "node:test";\nimport assert from "node:assert";\nimport { add, mul } from "../math.mjs";\n';
const TEST_MUL = 'test("multiplies", () => assert.equal(mul(2, 3), 6));\n';
const TEST_ADD = 'test("adds numbers", () => assert.equal(add(2, 3), 5));\n';

before(() => {
  dir = mkdtempSync(path.join(tmpdir(), "grade-local-test-"));
  git("init", "-q");
  mkdirSync(path.join(dir, "test"));
  writeFileSync(path.join(dir, "math.mjs"), MATH);
  writeFileSync(path.join(dir, "test/math.test.mjs"), TEST_HEAD + TEST_MUL);
  git("add", ".");
  git("commit", "-qm", "base");
  base = git("rev-parse", "HEAD").trim();
  // The task's test patch adds the test the bug fails; the fix is the model's patch.
  writeFileSync(path.join(dir, "test/math.test.mjs"), TEST_HEAD + TEST_MUL + TEST_ADD);
  testPatch = git("diff");
  git("checkout", "-q", "--", ".");
  writeFileSync(path.join(dir, "math.mjs"), MATH.replace("a - b", "a + b"));
  fixPatch = git("diff");
  git("checkout", "-q", "--", ".");
});

beforeEach(() => {
  git("reset", "-q", "--hard", base);
  git("clean", "-qfd");
});

after(() => rmSync(dir, { recursive: true, force: true }));

function job(over: Partial<GradeJob> = {}): GradeJob {
  const instance: GradingInstance = {
    instance_id: "evalfleet__tiny-1",
    repo: "evalfleet/tiny",
    version: null,
    FAIL_TO_PASS: ["- adds numbers"],
    PASS_TO_PASS: ["- multiplies"],
    base_commit: base,
    test_patch: testPatch,
  };
  return {
    instance,
    patch: fixPatch,
    checkoutDir: dir,
    testCmd: "node --test --test-reporter=tap test/math.test.mjs",
    logFormat: "tap",
    ...over,
  };
}

const signal = new AbortController().signal;

// The graded run must not think it is inside this test runner (node:test would refuse to run files).
const { NODE_TEST_CONTEXT: _inner, ...cleanEnv } = process.env;
const backend = () => createLocalBackend({ env: cleanEnv });

describe("local backend", () => {
  it("the fix resolves the task: FULL, with the test files reset afterwards", async () => {
    const outcome = await backend().grade(job(), signal);
    assert.equal(outcome.kind, "graded");
    if (outcome.kind !== "graded") return;
    assert.equal(outcome.status, "RESOLVED_FULL");
    assert.deepEqual(outcome.report["evalfleet__tiny-1"]?.tests_status?.FAIL_TO_PASS, {
      success: ["- adds numbers"],
      failure: [],
    });
    assert.match(
      outcome.testOutput,
      />>>>> Start Test Output[\s\S]*ok 1 - multiplies[\s\S]*>>>>> End Test Output/,
    );
    // Like the official script: the test file is back at base, only the model's change remains.
    assert.equal(git("status", "--porcelain").trim(), "M math.mjs");
  });

  it("without the fix the new test fails: NO", async () => {
    const outcome = await backend().grade(job({ patch: "", emptyPatch: "run" }), signal);
    assert.equal(outcome.kind, "graded");
    if (outcome.kind !== "graded") return;
    assert.equal(outcome.status, "RESOLVED_NO");
    assert.deepEqual(outcome.report["evalfleet__tiny-1"]?.tests_status?.FAIL_TO_PASS.failure, [
      "- adds numbers",
    ]);
    assert.deepEqual(outcome.report["evalfleet__tiny-1"]?.tests_status?.PASS_TO_PASS.success, [
      "- multiplies",
    ]);
  });

  it("a patch that applies with none of the chain is unresolved without a report", async () => {
    const broken = fixPatch.replace("a - b", "a * b * c");
    const outcome = await backend().grade(job({ patch: broken }), signal);
    assert.equal(outcome.kind, "not_graded");
    if (outcome.kind === "not_graded") assert.equal(outcome.reason, "patch_apply_failed");
  });

  it("a fuzzy patch falls through to `patch --fuzz`", async () => {
    // Shift the context so git apply (exact) fails but patch with fuzz succeeds.
    writeFileSync(path.join(dir, "math.mjs"), `// header\n${MATH}`);
    git("commit", "-qam", "shift");
    const shifted = fixPatch.replace("export const mul", "export const mult");
    const outcome = await backend().grade(job({ patch: shifted }), signal);
    assert.equal(outcome.kind, "graded");
  });

  it("tests over the timeout are an infrastructure failure", async () => {
    const outcome = await backend().grade(job({ testCmd: "sleep 30", timeoutS: 1 }), signal);
    assert.equal(outcome.kind, "infra_failure");
    if (outcome.kind === "infra_failure") assert.equal(outcome.failure.kind, "timeout");
  });

  it("a repository outside the official map must name its log format", async () => {
    await assert.rejects(backend().grade(job({ logFormat: "nope" }), signal), (err: unknown) => {
      assert.equal((err as EvalfleetError).issues[0]?.path, "logFormat");
      return true;
    });
  });

  it("the patched code finds no secrets in its environment, and keys it prints are redacted before the outcome is kept", async () => {
    const planted = "sk-ant-api03-PLANTEDgraderABCDEFGHIJKLMNOP";
    writeFileSync(
      path.join(dir, "math.mjs"),
      `console.log("ENV", JSON.stringify(process.env));\nconsole.log("KEY", "${planted}");\n${MATH.replace("a - b", "a + b")}`,
    );
    const leakyFix = git("diff");
    git("checkout", "-q", "--", ".");
    const env = {
      ...cleanEnv,
      ANTHROPIC_API_KEY: "plain-words-grader-key",
      DATABASE_URL: "postgres://u:pw-in-url@h/db",
      NATS_URL: "nats://u:nats-pw@h:4222",
      EVALFLEET_JUDGE_KEY: "judge-key-value",
    };
    const outcome = await createGrader(createLocalBackend({ env })).grade(job({ patch: leakyFix }), signal);
    assert.equal(outcome.kind, "graded");
    if (outcome.kind !== "graded") return;
    assert.equal(outcome.status, "RESOLVED_FULL", "grading itself is unchanged");
    assert.match(outcome.testOutput, /ENV \{/);
    for (const s of [planted, "plain-words-grader-key", "pw-in-url", "nats-pw", "judge-key-value"])
      assert.ok(!outcome.testOutput.includes(s), `${s} in the test output`);
    assert.match(outcome.testOutput, /KEY \[REDACTED\]/);
  });
});
