/** The grader-supervisor end to end: real nats-server, a fresh database, the repository's own sample tasks. */
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { startGraderSupervisor } from "../../actors/grader-supervisor/actor.js";
import { GradeLabels } from "../../actors/grader-supervisor/backends/docker.js";
import { createLocalBackend } from "../../actors/grader-supervisor/backends/local.js";
import type { GradeBackend } from "../../actors/grader-supervisor/backends/types.js";
import { loadTaskLibrary } from "../../actors/planner/library.js";
import type { Actor } from "../../actors/runtime/actor.js";
import type { ContainerRuntime } from "../../containers/index.js";
import { type BuiltImage, buildTaskImage } from "../../images/build.js";
import { silentLogger } from "../../lib/log.js";
import { openPlane, type Plane } from "../../plane/connect.js";
import type { RunConfigInput } from "../../protocol/config.js";
import { type GradeJob, type GradeResult, MessageTypes } from "../../protocol/messages.js";
import { BlobNames, StateKeys, Subjects } from "../../protocol/subjects.js";
import { type ByCell, collectByCell } from "../helpers/by-cell.js";
import { type FreshDb, freshDb } from "../helpers/db.js";
import { testBaseImage, testRegistry, testRuntime } from "../helpers/docker.js";
import { startNats, type TestNats } from "../helpers/nats.js";

const ROOT = path.resolve(import.meta.dirname, "../..");
const LIBRARY = path.join(ROOT, "examples/tasks");
const RUN = "grade-run";

let nats: TestNats;
let plane: Plane;
let fdb: FreshDb;
let results: ByCell<GradeResult>;
let gold: string;
let rt: ContainerRuntime;
let built: BuiltImage;

/** A grade job as the results-writer sends it: the patch inline (`inline`, a small one) or as the attempt's blob. */
async function submit(
  cellId: string,
  patch: string,
  taskId = "sample-calc-add",
  inline = false,
): Promise<void> {
  const patchRef = inline ? "" : BlobNames.attempt(RUN, cellId, 1, "patch.diff");
  if (!inline) await plane.blobs.putBlob({ name: patchRef }, new TextEncoder().encode(patch));
  const job: GradeJob = {
    type: MessageTypes.gradeJob,
    run: RUN,
    cellId,
    attempt: 1,
    taskId,
    patchRef,
    patch: inline ? patch : null,
    patchHash: "sha256:unused",
  };
  await plane.js.publish(Subjects.gradeJobs.one(RUN), JSON.stringify(job), { msgID: `${RUN}/${cellId}/1` });
}

before(async () => {
  nats = await startNats();
  plane = await openPlane({ nats: nats.settings, name: "grader-test" });
  fdb = await freshDb("grader");
  const library = await loadTaskLibrary(LIBRARY);
  const config: RunConfigInput = {
    name: RUN,
    harnesses: [{ name: "reference", adapter: "reference" }],
    models: [{ name: "m1", prices: { input_per_mtok: 1, output_per_mtok: 2 } }],
    tasks: ["*"],
    task_library_path: LIBRARY,
  };
  await plane.kv.jobs.put(StateKeys.jobRun(RUN), JSON.stringify(config));
  for (const t of library.tasks.values())
    await plane.kv.jobs.put(StateKeys.jobTask(RUN, t.id), JSON.stringify(t));
  gold = library.tasks.get("sample-calc-add")?.patch ?? "";
  // The calc task as a run sees it once validated in its instance image: pinned by the registry's digest.
  rt = (await testRuntime()).runtime;
  const calc = library.tasks.get("sample-calc-add");
  assert.ok(calc?.repo_path);
  built = await buildTaskImage(
    rt,
    {
      taskId: calc.id,
      instanceId: calc.id,
      source: path.join(LIBRARY, calc.repo_path),
      sourceKey: "grader-supervisor-test",
    },
    { base: (await testBaseImage()).ref, registry: await testRegistry() },
  );
  const pinned = { ...calc, id: "sample-calc-docker", instance_id: calc.id, image: built.ref };
  await plane.kv.jobs.put(StateKeys.jobTask(RUN, pinned.id), JSON.stringify(pinned));
  results = collectByCell<GradeResult>(plane.nc, Subjects.gradeResults.all, "grade result");
});

after(async () => {
  results?.stop();
  await plane?.close();
  await fdb?.cleanup();
  await nats?.cleanup();
});

describe("grader-supervisor", () => {
  let actor: Actor;
  let localGrades = 0;

  before(async () => {
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
      env: process.env,
      backends: { local: counting },
      containers: rt,
    });
  });

  after(async () => {
    await actor.drain(5_000);
  });

  it("the gold patch grades FULL with the official report", async () => {
    await submit("cell-gold", gold);
    const r = await results.wait("cell-gold");
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

  it("a job naming another run's resolved patch is refused: NO, never graded, a security event", async () => {
    // Another run's attempt wrote the gold patch; this job points at it instead of at its own attempt's blob.
    const theirs = BlobNames.attempt("other-run", "winner", 0, "patch.diff");
    await plane.blobs.putBlob({ name: theirs }, new TextEncoder().encode(gold));
    const events = plane.nc.subscribe(Subjects.events.run(RUN));
    const before = localGrades;
    const job: GradeJob = {
      type: MessageTypes.gradeJob,
      run: RUN,
      cellId: "cell-forged",
      attempt: 1,
      taskId: "sample-calc-add",
      patchRef: theirs,
      patchHash: "sha256:unused",
      patch: null,
    };
    await plane.js.publish(Subjects.gradeJobs.one(RUN), JSON.stringify(job), {
      msgID: `${RUN}/cell-forged/1`,
    });
    const r = await results.wait("cell-forged");
    assert.equal(r.status, "NO");
    assert.equal(r.resolved, false);
    assert.match(
      r.error ?? "",
      /refused patch "other-run\/winner\/0\/patch.diff".*not one of the attempt's own/,
    );
    assert.equal(localGrades, before, "the foreign patch was never run");
    for await (const m of events) {
      const e = m.json<{ kind: string; data?: Record<string, unknown> }>();
      if (e.kind !== "security") continue;
      assert.deepEqual(e.data?.check, "foreign_blob_ref");
      assert.equal(e.data?.ref, theirs);
      break;
    }
    events.unsubscribe();
    const rows = await fdb.db.query<{ check_name: string; ref: string }>(
      "SELECT check_name, ref FROM security_events WHERE run_name = $1 AND cell_id = 'cell-forged'",
      [RUN],
    );
    assert.deepEqual(rows.rows, [{ check_name: "foreign_blob_ref", ref: theirs }]);
  });

  it("a wrong patch, sent inline in its job, grades NO", async () => {
    await submit("cell-wrong", gold.replace("+  return a + b;", "+  return a * b;"), "sample-calc-add", true);
    const r = await results.wait("cell-wrong");
    assert.equal(r.status, "NO");
    assert.equal(r.resolved, false);
    assert.equal(r.error, null);
  });

  it("a patch that does not apply grades NO with the reason", async () => {
    await submit("cell-garbage", gold.replace("-  return a - b;", "-  return a / b;"));
    const r = await results.wait("cell-garbage");
    assert.equal(r.status, "NO");
    assert.match(r.error ?? "", /^patch_apply_failed/);
  });

  it("an identical patch for the same task is graded once (results cache)", async () => {
    const before = localGrades;
    await submit("cell-gold-again", gold);
    const r = await results.wait("cell-gold-again");
    assert.equal(r.status, "FULL");
    assert.equal(r.cached, true);
    assert.equal(localGrades, before, "no second run of the tests");
    const rows = await fdb.db.query<{ n: number }>("SELECT count(*)::int AS n FROM grade_cache");
    assert.equal(rows.rows[0]?.n, 3);
  });

  it("another sample task grades with its own tests", async () => {
    const library = await loadTaskLibrary(LIBRARY);
    await submit("cell-ranges", library.tasks.get("sample-ranges-sum")?.patch ?? "", "sample-ranges-sum");
    assert.equal((await results.wait("cell-ranges")).status, "FULL");
  });

  it("a task pinned to its instance image grades in a container by that digest", async () => {
    const before = localGrades;
    await submit("cell-docker", gold, "sample-calc-docker", true);
    const r = await results.wait("cell-docker");
    assert.equal(r.status, "FULL", r.error ?? "");
    assert.equal(r.imageDigest, built.digest);
    assert.equal(localGrades, before, "not graded on the host");
    const left = await rt.list({ [GradeLabels.role]: "grade", [GradeLabels.pid]: String(process.pid) });
    assert.deepEqual(left, [], "the grade container is removed");
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
      env: process.env,
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
    const r = await results.wait("cell-infra");
    assert.equal(r.status, "INFRA_FAILURE");
    assert.equal(r.resolved, false);
    assert.match(r.error ?? "", /out_of_disk after 3 attempt/);
    assert.equal(calls, 3);
  });

  it("a job for a task the run does not have is INFRA_FAILURE with the reason", async () => {
    await submit("cell-unknown", gold, "no-such-task");
    const r = await results.wait("cell-unknown");
    assert.equal(r.status, "INFRA_FAILURE");
    assert.match(r.error ?? "", /no-such-task.*not in the jobs bucket/);
  });
});
