/** From a task spec to a backend job, and from an outcome to the GradeResult on the wire. */
import assert from "node:assert/strict";
import path from "node:path";
import { describe, it } from "node:test";
import { gradeResultOf, prepareTaskJob } from "../../actors/grader-supervisor/task-job.js";
import { TaskSpecSchema } from "../../protocol/config.js";

const LIBRARY = path.resolve(import.meta.dirname, "../../examples/tasks");
const key = { run: "r", cellId: "c", attempt: 2 };
const swe = (over: Record<string, unknown> = {}) =>
  TaskSpecSchema.parse({
    id: "django__django-1",
    repo: "django/django",
    base_commit: "abc",
    version: "3.0",
    ...over,
  });

describe("prepareTaskJob", () => {
  it("a task shipped with evalfleet grades locally with a content digest and the pytest-style parser", async () => {
    const task = TaskSpecSchema.parse({
      id: "t1",
      repo_path: "repos/calc",
      test_command: "node test.js",
      FAIL_TO_PASS: ["test.js::add_positive"],
    });
    const a = await prepareTaskJob(task, "p", { libraryDir: LIBRARY });
    const b = await prepareTaskJob(task, "other", { libraryDir: LIBRARY });
    assert.equal(a.backend, "local");
    assert.equal(a.job.logFormat, "pytest");
    assert.equal(a.job.checkoutDir, path.join(LIBRARY, "repos/calc"));
    assert.match(a.imageDigest, /^sha256:[0-9a-f]{64}$/);
    assert.equal(a.imageDigest, b.imageDigest, "the digest is the environment's, not the patch's");
    const tap = await prepareTaskJob({ ...task, log_format: "tap" }, "p", { libraryDir: LIBRARY });
    assert.equal(tap.job.logFormat, "tap");
    assert.notEqual(tap.imageDigest, a.imageDigest, "another parser is another verdict");
    const other = await prepareTaskJob(task, "p", { libraryDir: LIBRARY, localLogFormat: "pytest_v2" });
    assert.equal(other.job.logFormat, "pytest_v2");
  });

  it("a SWE-bench task uses the official image, pinned by its own or the validated digest", async () => {
    const d = `sha256:${"1".repeat(64)}`;
    const pinned = await prepareTaskJob(swe({ image: `reg/x@${d}` }), "p", { libraryDir: LIBRARY });
    assert.deepEqual(pinned.job.image, { name: "reg/x", digest: d });
    const validated = await prepareTaskJob(swe(), "p", { libraryDir: LIBRARY, validatedDigest: d });
    assert.deepEqual(validated.job.image, {
      name: "swebench/sweb.eval.x86_64.django_1776_django-1",
      digest: d,
    });
    await assert.rejects(prepareTaskJob(swe(), "p", { libraryDir: LIBRARY }), /cannot be graded/);
  });

  it("open_ended tasks and tasks without an environment are not gradable", async () => {
    const open = TaskSpecSchema.parse({ id: "o", track: "open_ended", rubric: "r" });
    await assert.rejects(prepareTaskJob(open, "p", { libraryDir: LIBRARY }), /cannot be graded/);
    await assert.rejects(prepareTaskJob(TaskSpecSchema.parse({ id: "x" }), "p", { libraryDir: LIBRARY }));
  });
});

describe("gradeResultOf", () => {
  it("an environment failure is INFRA_FAILURE, never NO", () => {
    const r = gradeResultOf(
      key,
      "i",
      { kind: "infra_failure", failure: { kind: "image_pull", message: "denied" }, attempts: 3 },
      null,
    );
    assert.equal(r.status, "INFRA_FAILURE");
    assert.match(r.error ?? "", /image_pull after 3 attempt/);
  });

  it("an unappliable patch is NO with the reason and the report entry the harness would have", () => {
    const r = gradeResultOf(
      key,
      "i",
      { kind: "not_graded", resolved: false, reason: "patch_apply_failed", detail: "error: patch failed" },
      "sha256:x",
    );
    assert.equal(r.status, "NO");
    assert.deepEqual(r.report, {
      i: { patch_is_None: false, patch_exists: true, patch_successfully_applied: false, resolved: false },
    });
    assert.match(r.error ?? "", /^patch_apply_failed: error: patch failed/);
  });
});
