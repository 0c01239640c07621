/** The grader-supervisor end to end: real nats-server, a fresh database, the repository's own sample tasks. */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { Subscription } from "@nats-io/transport-node";
import { startGraderSupervisor } from "../../actors/grader-supervisor/actor.js";
import { createDockerBackend } from "../../actors/grader-supervisor/backends/docker.js";
import { createLocalBackend } from "../../actors/grader-supervisor/backends/local.js";
import type { GradeBackend } from "../../actors/grader-supervisor/backends/types.js";
import { officialImageName, pyJsonDumps } from "../../actors/grader-supervisor/grading/index.js";
import { loadTaskLibrary } from "../../actors/planner/library.js";
import type { Actor } from "../../actors/runtime/actor.js";
import { openPlane, type Plane } from "../../actors/runtime/connect.js";
import type { RunConfigInput } from "../../protocol/config.js";
import { silentLogger } from "../../protocol/log.js";
import { type GradeJob, type GradeResult, MessageTypes } from "../../protocol/messages.js";
import { BlobNames, StateKeys, Subjects } from "../../protocol/subjects.js";
import { type FreshDb, freshDb } from "../helpers/db.js";
import { startNats, type TestNats } from "../helpers/nats.js";

const ROOT = path.resolve(import.meta.dirname, "../..");
const LIBRARY = path.join(ROOT, "examples/tasks");
// A real SWE-bench case: its official eval log is what the fake docker's eval prints.
const CASE = path.resolve(
  ROOT,
  "../shared/conformance/swebench/cases/astropy__astropy-14365__vexp-swebench-1774184993333",
);
const DIGEST = `sha256:${"cd".repeat(32)}`;
const RUN = "grade-run";

let nats: TestNats;
let plane: Plane;
let fdb: FreshDb;
let sub: Subscription;
let gold: string;
const results = new Map<string, GradeResult>();
const waiters = new Map<string, (r: GradeResult) => void>();

function waitResult(cellId: string, timeoutMs = 60_000): Promise<GradeResult> {
  const have = results.get(cellId);
  if (have) return Promise.resolve(have);
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no grade result for ${cellId}`)), timeoutMs);
    waiters.set(cellId, (r) => {
      clearTimeout(t);
      resolve(r);
    });
  });
}

async function submit(cellId: string, patch: string, taskId = "sample-calc-add"): Promise<void> {
  const patchRef = BlobNames.attempt(RUN, cellId, 1, "patch.diff");
  await plane.blobs.putBlob({ name: patchRef }, new TextEncoder().encode(patch));
  const job: GradeJob = {
    type: MessageTypes.gradeJob,
    run: RUN,
    cellId,
    attempt: 1,
    taskId,
    patchRef,
    patchHash: "sha256:unused",
  };
  await plane.js.publish(Subjects.gradeJobs.one(RUN), JSON.stringify(job), { msgID: `${RUN}/${cellId}/1` });
}

before(async () => {
  nats = await startNats();
  plane = await openPlane({ servers: nats.url, name: "grader-test" });
  fdb = await freshDb("grader");
  const library = await loadTaskLibrary(LIBRARY);
  const config: RunConfigInput = {
    name: RUN,
    harnesses: [{ name: "reference", adapter: "reference" }],
    models: [{ name: "m1" }],
    tasks: ["*"],
    task_library_path: LIBRARY,
  };
  await plane.kv.jobs.put(StateKeys.jobRun(RUN), JSON.stringify(config));
  for (const t of library.tasks.values())
    await plane.kv.jobs.put(StateKeys.jobTask(RUN, t.id), JSON.stringify(t));
  gold = library.tasks.get("sample-calc-add")?.patch ?? "";
  const instance = JSON.parse(readFileSync(path.join(CASE, "instance.json"), "utf8")) as {
    instance_id: string;
  };
  const swe = {
    ...instance,
    id: instance.instance_id,
    image: `${officialImageName(instance.instance_id)}@${DIGEST}`,
  };
  await plane.kv.jobs.put(StateKeys.jobTask(RUN, swe.id), JSON.stringify(swe));
  sub = plane.nc.subscribe(Subjects.gradeResults.all);
  void (async () => {
    for await (const m of sub) {
      const r = m.json<GradeResult>();
      results.set(r.cellId, r);
      waiters.get(r.cellId)?.(r);
    }
  })();
});

after(async () => {
  sub?.unsubscribe();
  await plane?.close();
  await fdb?.cleanup();
  await nats?.cleanup();
});

describe("grader-supervisor", () => {
  let actor: Actor;
  let localGrades = 0;
  let dockerDir: string;

  before(async () => {
    dockerDir = mkdtempSync(path.join(tmpdir(), "grader-fake-docker-"));
    const docker = createDockerBackend({
      dockerPath: path.join(ROOT, "test/fixtures/fake-docker/docker"),
      env: {
        ...process.env,
        FAKE_DOCKER_LOG: path.join(dockerDir, "calls.log"),
        FAKE_DOCKER_STATE: path.join(dockerDir, "state"),
        FAKE_DOCKER_HAVE_IMAGE: "1",
        FAKE_DOCKER_EVAL_OUTPUT: path.join(CASE, "test_output.txt"),
      },
    });
    const { NODE_TEST_CONTEXT: _inner, ...env } = process.env;
    const real = createLocalBackend({ env });
    const counting: GradeBackend = {
      name: "local",
      grade: (job, signal) => {
        localGrades++;
        return real.grade(job, signal);
      },
    };
    actor = await startGraderSupervisor({
      plane,
      db: fdb.db,
      log: silentLogger(),
      backends: { local: counting, docker },
    });
  });

  after(async () => {
    await actor.drain(5_000);
    rmSync(dockerDir, { recursive: true, force: true });
  });

  it("the gold patch grades FULL with the official report", async () => {
    await submit("cell-gold", gold);
    const r = await waitResult("cell-gold");
    assert.equal(r.status, "FULL");
    assert.equal(r.resolved, true);
    assert.equal(r.cached, false);
    assert.match(r.imageDigest ?? "", /^sha256:[0-9a-f]{64}$/);
    const entry = r.report["sample-calc-add"] as { tests_status: { FAIL_TO_PASS: { success: string[] } } };
    assert.deepEqual(entry.tests_status.FAIL_TO_PASS.success, [
      "test.js::add_positive",
      "test.js::add_negative",
    ]);
    const log = await plane.blobs.getBlob(BlobNames.attempt(RUN, "cell-gold", 1, "test_output.txt"));
    assert.match(new TextDecoder().decode(log ?? new Uint8Array()), /PASSED test\.js::add_positive/);
  });

  it("a wrong patch grades NO", async () => {
    await submit("cell-wrong", gold.replace("+  return a + b;", "+  return a * b;"));
    const r = await waitResult("cell-wrong");
    assert.equal(r.status, "NO");
    assert.equal(r.resolved, false);
    assert.equal(r.error, null);
  });

  it("a patch that does not apply grades NO with the reason", async () => {
    await submit("cell-garbage", gold.replace("-  return a - b;", "-  return a / b;"));
    const r = await waitResult("cell-garbage");
    assert.equal(r.status, "NO");
    assert.match(r.error ?? "", /^patch_apply_failed/);
  });

  it("an identical patch for the same task is graded once (results cache)", async () => {
    const before = localGrades;
    await submit("cell-gold-again", gold);
    const r = await waitResult("cell-gold-again");
    assert.equal(r.status, "FULL");
    assert.equal(r.cached, true);
    assert.equal(localGrades, before, "no second run of the tests");
    const rows = await fdb.db.query<{ n: number }>("SELECT count(*)::int AS n FROM grade_cache");
    assert.equal(rows.rows[0]?.n, 3);
  });

  it("another sample task grades with its own tests", async () => {
    const library = await loadTaskLibrary(LIBRARY);
    await submit("cell-ranges", library.tasks.get("sample-ranges-sum")?.patch ?? "", "sample-ranges-sum");
    assert.equal((await waitResult("cell-ranges")).status, "FULL");
  });

  it("a SWE-bench task grades in its pinned image; the report is the official report.json", async () => {
    await submit("cell-swe", readFileSync(path.join(CASE, "patch.diff"), "utf8"), "astropy__astropy-14365");
    const r = await waitResult("cell-swe");
    assert.equal(r.status, "FULL");
    assert.equal(r.imageDigest, DIGEST);
    assert.equal(
      `${pyJsonDumps(r.report)}\n`.trim(),
      readFileSync(path.join(CASE, "report.json"), "utf8").trim(),
    );
    const calls = readFileSync(path.join(dockerDir, "calls.log"), "utf8");
    assert.match(calls, new RegExp(`sweb\\.eval\\.x86_64\\.astropy_1776_astropy-14365@${DIGEST}`));
    assert.match(calls, /^rm\x1f-f\x1f-v\x1f/m, "the container is removed");
  });
});

describe("grader-supervisor on a broken environment", () => {
  let actor: Actor;
  let calls = 0;

  before(async () => {
    const broken: GradeBackend = {
      name: "local",
      grade: async () => {
        calls++;
        return {
          kind: "infra_failure",
          failure: { kind: "out_of_disk", message: "no space left" },
          attempts: 1,
        };
      },
    };
    actor = await startGraderSupervisor({
      plane,
      db: fdb.db,
      log: silentLogger(),
      backends: { local: broken },
      retry: { maxAttempts: 3, baseDelayMs: 1, maxDelayMs: 5 },
    });
  });

  after(async () => {
    await actor.drain(5_000);
  });

  it("an infrastructure failure after the retries is INFRA_FAILURE, not NO", async () => {
    // A patch never seen before, so the cache cannot answer.
    await submit("cell-infra", gold.replace("+  return a + b;", "+  return b + a;"));
    const r = await waitResult("cell-infra");
    assert.equal(r.status, "INFRA_FAILURE");
    assert.equal(r.resolved, false);
    assert.match(r.error ?? "", /out_of_disk after 3 attempt/);
    assert.equal(calls, 3);
  });

  it("a job for a task the run does not have is INFRA_FAILURE with the reason", async () => {
    await submit("cell-unknown", gold, "no-such-task");
    const r = await waitResult("cell-unknown");
    assert.equal(r.status, "INFRA_FAILURE");
    assert.match(r.error ?? "", /no-such-task.*not in the jobs bucket/);
  });
});
