/**
 * The docker grading backend in real containers: a sample task's instance image built offline, pushed to the test
 * registry, graded by digest. What the container is allowed (user, network, limits) is read from inside it; the
 * environment's failures (pull, start, timeout, memory) end as infrastructure failures, never as the model's.
 * Replayed official logs are graded in test/unit/grading-conformance.test.ts.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import path from "node:path";
import { before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { gradeCacheKey, MemoryGradeCache } from "../../actors/grader-supervisor/backends/cache.js";
import {
  clampLimits,
  createDockerBackend,
  DEFAULT_GRADE_LIMITS,
  GradeLabels,
  sweepGradeContainers,
} from "../../actors/grader-supervisor/backends/docker.js";
import { createGrader, graderBackoff } from "../../actors/grader-supervisor/backends/grader.js";
import type { GradeBackend, GradeJob, GradeOutcome } from "../../actors/grader-supervisor/backends/types.js";
import { type ContainerRuntime, tarFiles } from "../../containers/index.js";
import { GRADER_VERSION } from "../../grading/index.js";
import { type BuiltImage, buildTaskImage } from "../../images/build.js";
import { silentLogger } from "../../lib/log.js";
import { backoffDelayMs } from "../../lib/retry.js";
import { testBaseImage, testRegistry, testRuntime } from "../helpers/docker.js";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const calcRepo = path.join(repoRoot, "examples/tasks/repos/calc");
const GOLD = [
  "diff --git a/calc.js b/calc.js",
  "--- a/calc.js",
  "+++ b/calc.js",
  "@@ -1,6 +1,6 @@",
  " // A tiny calculator module.",
  " export function add(a, b) {",
  "-  return a - b;",
  "+  return a + b;",
  " }",
  " ",
  " export function sub(a, b) {",
  "",
].join("\n");
const noSleep = { sleep: async () => {} };

let rt: ContainerRuntime;
let image: BuiltImage;

function job(over: Partial<GradeJob> = {}): GradeJob {
  return {
    instance: {
      instance_id: "sample-calc-add",
      repo: "evalfleet/sample-calc",
      version: null,
      FAIL_TO_PASS: ["test.js::add_positive", "test.js::add_negative"],
      PASS_TO_PASS: ["test.js::sub_basic"],
      test_patch: "",
    },
    patch: GOLD,
    testCmd: "node test.js",
    logFormat: "pytest",
    image: { name: image.name, digest: image.digest },
    ...over,
  };
}

function backend(over: Partial<Parameters<typeof createDockerBackend>[0]> = {}): GradeBackend {
  return createDockerBackend({ runtime: rt, logger: silentLogger(), ...over });
}

const signal = () => new AbortController().signal;

async function myGradeContainers(): Promise<string[]> {
  return (await rt.list({ [GradeLabels.role]: "grade", [GradeLabels.pid]: String(process.pid) })).map(
    (c) => c.name,
  );
}

before(async () => {
  rt = (await testRuntime()).runtime;
  const base = await testBaseImage();
  image = await buildTaskImage(
    rt,
    {
      taskId: "sample-calc-add",
      instanceId: "sample-calc-add",
      source: calcRepo,
      sourceKey: "grade-docker-test",
    },
    { base: base.ref, registry: await testRegistry() },
  );
});

describe("docker backend, real containers", () => {
  it("grades the gold patch resolved, in the image pinned by digest, and removes the container", async () => {
    assert.match(image.digest, /^sha256:[0-9a-f]{64}$/);
    const out = await backend().grade(job(), signal());
    assert.equal(out.kind, "graded", JSON.stringify(out).slice(0, 2000));
    assert.equal(out.kind === "graded" && out.status, "RESOLVED_FULL");
    assert.equal(out.resolved, true);
    assert.match(out.kind === "graded" ? out.testOutput : "", /PASSED test\.js::add_positive/);
    assert.deepEqual(await myGradeContainers(), []);
  });

  it("runs as the image's grading user, with no network and the limits set", async () => {
    const probe =
      "id -u; ls /sys/class/net; cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max 2>/dev/null; node test.js";
    const out = await backend({ limits: { pids: 321 } }).grade(job({ testCmd: probe }), signal());
    assert.equal(out.kind, "graded");
    const log = out.kind === "graded" ? out.testOutput : "";
    const lines = log.split("\n");
    assert.ok(lines.includes("1000"), log);
    assert.ok(lines.includes("lo") && !lines.some((l) => /^eth|^docker/.test(l)), log);
    assert.ok(lines.includes("321"), log);
  });

  it("an empty patch is skipped, or run (gold validation) and unresolved", async () => {
    const skipped = await backend().grade(job({ patch: "" }), signal());
    assert.deepEqual(
      [skipped.kind, skipped.kind === "not_graded" && skipped.reason],
      ["not_graded", "empty_patch"],
    );
    const ran = await backend().grade(job({ patch: "", emptyPatch: "run" }), signal());
    assert.equal(ran.kind, "graded");
    assert.equal(ran.kind === "graded" && ran.status, "RESOLVED_NO");
  });

  it("a patch that never applies is the model's failure: unresolved, not retried", async () => {
    let calls = 0;
    const inner = backend();
    const counting: GradeBackend = {
      name: "docker",
      grade: (j, s) => {
        calls++;
        return inner.grade(j, s);
      },
    };
    const bad = GOLD.replace("-  return a - b;", "-  return a * b;");
    const out = await createGrader(counting, noSleep).grade(job({ patch: bad }), signal());
    assert.equal(out.kind, "not_graded");
    assert.equal(out.kind === "not_graded" && out.reason, "patch_apply_failed");
    assert.match(out.kind === "not_graded" ? out.detail : "", /patch does not apply|FAILED|Hunk/i);
    assert.equal(calls, 1);
    assert.deepEqual(await myGradeContainers(), []);
  });

  it("tests over the timeout are killed, retried, and end as an infrastructure failure", async () => {
    const out = await createGrader(backend(), { ...noSleep, retry: { maxAttempts: 2 } }).grade(
      job({ testCmd: "sleep 300", timeoutS: 2 }),
      signal(),
    );
    assert.equal(out.kind, "infra_failure");
    assert.deepEqual(out.kind === "infra_failure" && [out.failure.kind, out.attempts], ["timeout", 2]);
    assert.deepEqual(await myGradeContainers(), []);
  });

  it("tests killed by the memory limit are the environment's failure", async () => {
    const hog = "node -e 'const a=[];for(;;)a.push(Buffer.alloc(8<<20,1))'; node test.js";
    const out = await backend({ limits: { memoryBytes: 96 * 2 ** 20 } }).grade(
      job({ testCmd: hog }),
      signal(),
    );
    assert.equal(out.kind, "infra_failure", JSON.stringify(out).slice(0, 500));
    assert.match(out.kind === "infra_failure" ? out.failure.message : "", /memory limit/);
  });

  it("an image the registry does not have is a pull failure, retried", async () => {
    const missing = { name: image.name, digest: `sha256:${"0".repeat(64)}` };
    const out = await createGrader(backend(), { ...noSleep, retry: { maxAttempts: 2 } }).grade(
      job({ image: missing }),
      signal(),
    );
    assert.equal(out.kind, "infra_failure");
    assert.deepEqual(out.kind === "infra_failure" && [out.failure.kind, out.attempts], ["image_pull", 2]);
  });

  it("a container that cannot start is a start failure", async () => {
    const tag = `evalfleet-test/no-tail:${randomBytes(3).toString("hex")}`;
    const id = await rt.importRootfs(
      (await import("node:stream")).Readable.from([tarFiles([{ name: "etc/hello", content: "x" }])]),
      tag,
    );
    try {
      const out = await backend().grade(
        job({
          image: { name: "evalfleet-test/no-tail", digest: id },
          instance: { ...job().instance, base_commit: "a".repeat(40) },
        }),
        signal(),
      );
      assert.equal(out.kind, "infra_failure");
      assert.equal(out.kind === "infra_failure" && out.failure.kind, "container_start");
      assert.deepEqual(await myGradeContainers(), []);
    } finally {
      await rt.removeImage(tag, { force: true });
    }
  });

  it("refuses an image that is not pinned by digest, before touching the daemon", async () => {
    await assert.rejects(
      backend().grade(job({ image: { name: image.name, digest: "latest" } }), signal()),
      /pinned by digest/,
    );
  });

  it("a restarted grader removes the containers a dead one left, and only those", async () => {
    const base = (await testBaseImage()).ref;
    const labels = (pid: number) => ({
      [GradeLabels.role]: "grade",
      [GradeLabels.host]: hostname(),
      [GradeLabels.pid]: String(pid),
    });
    const dead = await rt.create({ image: base, command: ["true"], labels: labels(2 ** 22 + 12345) });
    const live = await rt.create({ image: base, command: ["true"], labels: labels(process.ppid) });
    try {
      const removed = await sweepGradeContainers(rt, silentLogger());
      assert.ok(removed.includes(dead.name));
      assert.equal(await dead.state(), null);
      assert.notEqual(await live.state(), null);
    } finally {
      await live.remove();
      await dead.remove();
    }
  });

  it("clamps CPU and memory limits to the daemon's host", () => {
    const small = { info: { cpus: 1, memoryBytes: 2 ** 30 } } as ContainerRuntime;
    assert.deepEqual(clampLimits(DEFAULT_GRADE_LIMITS, small), { memoryBytes: 2 ** 30, cpus: 1, pids: 4096 });
  });
});

describe("results cache", () => {
  const DIGEST = `sha256:${"ab".repeat(32)}`;
  function countingBackend(outcome: GradeOutcome): GradeBackend & { calls: number } {
    const b = {
      name: "stub",
      calls: 0,
      async grade() {
        b.calls++;
        await new Promise((r) => setImmediate(r));
        return outcome;
      },
    };
    return b;
  }
  const graded: GradeOutcome = {
    kind: "not_graded",
    resolved: false,
    reason: "patch_apply_failed",
    detail: "x",
  };
  const stubJob = (patch: string): GradeJob => ({
    instance: { instance_id: "i", repo: "r", version: "1", FAIL_TO_PASS: [], PASS_TO_PASS: [] },
    patch,
    image: { name: "x/y", digest: DIGEST },
  });

  it("identical patches on the same image are graded once; another patch is graded again", async () => {
    const b = countingBackend(graded);
    const grader = createGrader(b, { cache: new MemoryGradeCache(), ...noSleep });
    const [x, y] = await Promise.all([
      grader.grade(stubJob("p"), signal()),
      grader.grade(stubJob("p"), signal()),
    ]);
    assert.deepEqual(y, x, "a concurrent identical job shares the in-flight grade");
    const third = await grader.grade(stubJob("p"), signal());
    assert.equal(third.kind === "not_graded" && third.cached, true);
    assert.equal(b.calls, 1);
    await grader.grade(stubJob("p\n"), signal());
    assert.equal(b.calls, 2);
  });

  it("infrastructure failures are not cached", async () => {
    const cache = new MemoryGradeCache();
    const b = countingBackend({
      kind: "infra_failure",
      failure: { kind: "image_pull", message: "x" },
      attempts: 1,
    });
    await createGrader(b, { cache, retry: { maxAttempts: 1 }, ...noSleep }).grade(stubJob("p"), signal());
    assert.equal(await cache.get(gradeCacheKey(DIGEST, "p")), undefined);
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
      [1, 2, 3, 4].map((n) => backoffDelayMs(graderBackoff(p), n, () => 0.5)),
      [1000, 2000, 3000, 3000],
    );
  });
});
