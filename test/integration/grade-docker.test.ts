/**
 * The docker backend against a fake docker executable (test/fixtures/fake-docker/docker) that records
 * its argv and plays failures: the commands, the container lifecycle, retries of environment failures,
 * and the results cache.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterEach, beforeEach, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { gradeCacheKey, MemoryGradeCache } from "../../actors/grader-supervisor/backends/cache.js";
import { createDockerBackend } from "../../actors/grader-supervisor/backends/docker.js";
import { backoffMs, createGrader, DEFAULT_RETRY } from "../../actors/grader-supervisor/backends/grader.js";
import type { GradeJob } from "../../actors/grader-supervisor/backends/types.js";
import {
  GRADER_VERSION,
  makeEvalScript,
  officialImageName,
  parseGradingInstance,
  pyJsonDumps,
} from "../../actors/grader-supervisor/grading/index.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const fakeDocker = path.join(repoRoot, "test/fixtures/fake-docker/docker");
const caseDir = path.resolve(
  repoRoot,
  "../shared/conformance/swebench/cases/astropy__astropy-14365__vexp-swebench-1774184993333",
);
const DIGEST = `sha256:${"ab".repeat(32)}`;

let tmp: string;
let logFile: string;
let stateDir: string;

function env(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return { ...process.env, FAKE_DOCKER_LOG: logFile, FAKE_DOCKER_STATE: stateDir, ...extra };
}

function calls(): string[][] {
  return readFileSync(logFile, "utf8")
    .split("\n")
    .filter((l) => l.length > 0)
    .map((l) => l.split("\x1f").slice(0, -1));
}

function job(over: Partial<GradeJob> = {}): GradeJob {
  const instance = parseGradingInstance(
    JSON.parse(readFileSync(path.join(caseDir, "instance.json"), "utf8")),
  );
  return {
    instance,
    patch: readFileSync(path.join(caseDir, "patch.diff"), "utf8"),
    image: { name: officialImageName(instance.instance_id), digest: DIGEST },
    ...over,
  };
}

const noSleep = { sleep: async () => {} };

beforeEach(() => {
  tmp = mkdtempSync(path.join(tmpdir(), "grade-docker-test-"));
  logFile = path.join(tmp, "calls.log");
  stateDir = path.join(tmp, "state");
  writeFileSync(logFile, "");
});

afterEach(() => {
  rmSync(tmp, { recursive: true, force: true });
});

describe("docker backend", () => {
  it("runs the official flow and grades the log exactly as the harness", async () => {
    const backend = createDockerBackend({
      dockerPath: fakeDocker,
      env: env({ FAKE_DOCKER_EVAL_OUTPUT: path.join(caseDir, "test_output.txt") }),
    });
    const outcome = await backend.grade(job(), new AbortController().signal);
    assert.equal(outcome.kind, "graded");
    if (outcome.kind !== "graded") return;
    assert.equal(outcome.resolved, true);
    assert.equal(pyJsonDumps(outcome.report), readFileSync(path.join(caseDir, "report.json"), "utf8"));

    const c = calls();
    const ref = `swebench/sweb.eval.x86_64.astropy_1776_astropy-14365@${DIGEST}`;
    const name = (c[2] as string[])[2] as string;
    assert.match(name, /^evalfleet-grade-astropy__astropy-14365-[0-9a-f]{8}$/);
    assert.deepEqual(c[0], ["image", "inspect", "--format", "{{.Id}}", ref]);
    assert.deepEqual(c[1], ["pull", ref]);
    assert.deepEqual(c[2], [
      "create",
      "--name",
      name,
      "--platform",
      "linux/x86_64",
      "--user",
      "root",
      ref,
      "tail",
      "-f",
      "/dev/null",
    ]);
    assert.deepEqual(c[3], ["start", name]);
    assert.equal(c[4]?.[0], "cp");
    assert.equal(c[4]?.[2], `${name}:/tmp/patch.diff`);
    assert.deepEqual(c[5], [
      "exec",
      "-w",
      "/testbed",
      "-u",
      "root",
      name,
      "git",
      "apply",
      "--verbose",
      "/tmp/patch.diff",
    ]);
    assert.equal(c[6]?.[2], `${name}:/eval.sh`);
    assert.deepEqual(c[7], ["exec", name, "/bin/bash", "/eval.sh"]);
    assert.deepEqual(c[8], ["rm", "-f", "-v", name]);
    assert.equal(c.length, 9);
    // What went into the container is the official patch and eval script.
    assert.equal(readFileSync(path.join(stateDir, "patch.diff"), "utf8"), job().patch);
    assert.equal(readFileSync(path.join(stateDir, "eval.sh"), "utf8"), makeEvalScript(job().instance));
  });

  it("uses a locally present image without pulling", async () => {
    const backend = createDockerBackend({
      dockerPath: fakeDocker,
      env: env({
        FAKE_DOCKER_HAVE_IMAGE: "1",
        FAKE_DOCKER_EVAL_OUTPUT: path.join(caseDir, "test_output.txt"),
      }),
    });
    const outcome = await backend.grade(job(), new AbortController().signal);
    assert.equal(outcome.kind, "graded");
    assert.ok(!calls().some((c) => c[0] === "pull"));
  });

  it("walks the patch-apply fallback chain in order", async () => {
    const backend = createDockerBackend({
      dockerPath: fakeDocker,
      env: env({ FAKE_DOCKER_APPLY_OK: "3", FAKE_DOCKER_EVAL_OUTPUT: path.join(caseDir, "test_output.txt") }),
    });
    const outcome = await backend.grade(job(), new AbortController().signal);
    assert.equal(outcome.kind, "graded");
    const applies = calls()
      .filter((c) => c[0] === "exec" && c.at(-1) === "/tmp/patch.diff")
      .map((c) => c.slice(6, -1).join(" "));
    assert.deepEqual(applies, [
      "git apply --verbose",
      "git apply --verbose --reject",
      "patch --batch --fuzz=5 -p1 -i",
    ]);
  });

  it("a patch that never applies is the model's failure: unresolved, no report, not retried, container removed", async () => {
    const grader = createGrader(
      createDockerBackend({ dockerPath: fakeDocker, env: env({ FAKE_DOCKER_APPLY_OK: "0" }) }),
      noSleep,
    );
    const outcome = await grader.grade(job(), new AbortController().signal);
    assert.equal(outcome.kind, "not_graded");
    if (outcome.kind !== "not_graded") return;
    assert.equal(outcome.reason, "patch_apply_failed");
    assert.equal(outcome.resolved, false);
    const c = calls();
    assert.equal(c.filter((x) => x[0] === "pull").length, 1);
    assert.ok(!c.some((x) => x.at(-1) === "/eval.sh"), "tests must not run");
    assert.equal(c.at(-1)?.[0], "rm");
  });

  it("an image pull failure is retried with backoff and then succeeds", async () => {
    const sleeps: number[] = [];
    const grader = createGrader(
      createDockerBackend({
        dockerPath: fakeDocker,
        env: env({
          FAKE_DOCKER_FAIL_PULL: "2",
          FAKE_DOCKER_EVAL_OUTPUT: path.join(caseDir, "test_output.txt"),
        }),
      }),
      {
        retry: { maxAttempts: 3, baseDelayMs: 100, maxDelayMs: 1000 },
        sleep: async (ms) => void sleeps.push(ms),
      },
    );
    const outcome = await grader.grade(job(), new AbortController().signal);
    assert.equal(outcome.kind, "graded");
    assert.deepEqual(sleeps, [100, 200]);
    const c = calls();
    assert.equal(c.filter((x) => x[0] === "pull").length, 3);
    // Every attempt cleans up after itself.
    assert.equal(c.filter((x) => x[0] === "rm").length, 3);
  });

  for (const [label, extra, kind] of [
    ["image pull", { FAKE_DOCKER_FAIL_PULL: "always" }, "image_pull"],
    ["container start", { FAKE_DOCKER_FAIL_START: "always" }, "container_start"],
    ["out of disk", { FAKE_DOCKER_NO_DISK: "always" }, "out_of_disk"],
  ] as const) {
    it(`a persistent ${label} failure ends as an infrastructure failure, never a verdict`, async () => {
      const grader = createGrader(createDockerBackend({ dockerPath: fakeDocker, env: env(extra) }), noSleep);
      const outcome = await grader.grade(job(), new AbortController().signal);
      assert.equal(outcome.kind, "infra_failure");
      if (outcome.kind !== "infra_failure") return;
      assert.equal(outcome.failure.kind, kind);
      assert.equal(outcome.attempts, DEFAULT_RETRY.maxAttempts);
      assert.ok(!("resolved" in outcome));
      const c = calls();
      assert.equal(c.filter((x) => x[0] === "rm").length, DEFAULT_RETRY.maxAttempts);
      assert.ok(c.filter((x) => x[0] === "rm").every((x) => x[1] === "-f" && x[2] === "-v"));
    });
  }

  it("a test run over the timeout is killed, the container removed, and it counts as infrastructure", async () => {
    const backend = createDockerBackend({ dockerPath: fakeDocker, env: env({ FAKE_DOCKER_HANG_EVAL: "1" }) });
    const started = Date.now();
    const outcome = await backend.grade(job({ timeoutS: 1 }), new AbortController().signal);
    assert.ok(Date.now() - started < 15_000);
    assert.equal(outcome.kind, "infra_failure");
    if (outcome.kind === "infra_failure") assert.equal(outcome.failure.kind, "timeout");
    assert.equal(calls().at(-1)?.[0], "rm");
  });

  it("a log that stops before the tests grades as the harness does: not applied, unresolved", async () => {
    const truncated = path.join(tmp, "truncated.txt");
    const full = readFileSync(path.join(caseDir, "test_output.txt"), "utf8");
    writeFileSync(truncated, full.slice(0, full.indexOf("+ : '>>>>> Start Test Output'")));
    const backend = createDockerBackend({
      dockerPath: fakeDocker,
      env: env({ FAKE_DOCKER_EVAL_OUTPUT: truncated }),
    });
    const outcome = await backend.grade(job(), new AbortController().signal);
    assert.equal(outcome.kind, "graded");
    if (outcome.kind !== "graded") return;
    assert.deepEqual(outcome.report, {
      "astropy__astropy-14365": {
        patch_is_None: false,
        patch_exists: true,
        patch_successfully_applied: false,
        resolved: false,
      },
    });
  });

  it("refuses an image that is not pinned by digest, before touching docker", async () => {
    const backend = createDockerBackend({ dockerPath: fakeDocker, env: env() });
    await assert.rejects(
      backend.grade(job({ image: { name: "swebench/x", digest: "latest" } }), new AbortController().signal),
      /pinned by digest/,
    );
    assert.equal(calls().length, 0);
  });

  it("skips an empty patch like the harness, or runs it for gold validation", async () => {
    const backend = createDockerBackend({
      dockerPath: fakeDocker,
      env: env({ FAKE_DOCKER_EVAL_OUTPUT: path.join(caseDir, "test_output.txt") }),
    });
    const skipped = await backend.grade(job({ patch: "" }), new AbortController().signal);
    assert.equal(skipped.kind, "not_graded");
    assert.equal(calls().length, 0);
    const ran = await backend.grade(job({ patch: "", emptyPatch: "run" }), new AbortController().signal);
    assert.equal(ran.kind, "graded");
    assert.ok(!calls().some((c) => c.at(-1) === "/tmp/patch.diff"), "nothing to apply");
  });
});

describe("results cache", () => {
  it("identical patches on the same image are graded once; another patch is graded again", async () => {
    const cache = new MemoryGradeCache();
    const grader = createGrader(
      createDockerBackend({
        dockerPath: fakeDocker,
        env: env({ FAKE_DOCKER_EVAL_OUTPUT: path.join(caseDir, "test_output.txt") }),
      }),
      { cache, ...noSleep },
    );
    const signal = new AbortController().signal;
    const [a, b] = await Promise.all([grader.grade(job(), signal), grader.grade(job(), signal)]);
    assert.equal(a.kind, "graded");
    assert.deepEqual(b, a, "a concurrent identical job shares the in-flight grade");
    const third = await grader.grade(job(), signal);
    assert.equal(third.kind === "graded" && third.cached, true);
    assert.equal(calls().filter((c) => c[0] === "pull").length, 1);

    await grader.grade(job({ patch: `${job().patch}\n` }), signal);
    assert.equal(calls().filter((c) => c[0] === "pull").length, 2);
  });

  it("infrastructure failures are not cached", async () => {
    const cache = new MemoryGradeCache();
    const grader = createGrader(
      createDockerBackend({ dockerPath: fakeDocker, env: env({ FAKE_DOCKER_FAIL_PULL: "always" }) }),
      {
        cache,
        retry: { maxAttempts: 1 },
        ...noSleep,
      },
    );
    await grader.grade(job(), new AbortController().signal);
    assert.equal(await cache.get(gradeCacheKey(DIGEST, job().patch)), undefined);
  });

  it("the key is sha256 of image digest, patch hash and grader version", () => {
    const k = gradeCacheKey(DIGEST, "p");
    assert.match(k, /^[0-9a-f]{64}$/);
    assert.notEqual(k, gradeCacheKey(DIGEST, "q"));
    assert.notEqual(k, gradeCacheKey(`sha256:${"cd".repeat(32)}`, "p"));
    assert.notEqual(k, gradeCacheKey(DIGEST, "p", `${GRADER_VERSION}-next`));
    assert.notEqual(gradeCacheKey(DIGEST, null), gradeCacheKey(DIGEST, ""));
  });

  it("backoff doubles and is capped", () => {
    const p = { maxAttempts: 5, baseDelayMs: 1000, maxDelayMs: 3000 };
    assert.deepEqual(
      [1, 2, 3, 4].map((n) => backoffMs(p, n)),
      [1000, 2000, 3000, 3000],
    );
  });
});
