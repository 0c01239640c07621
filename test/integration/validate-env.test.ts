/**
 * Gold validation on the repository's sample tasks and on deliberately broken ones: in containers, from each task's
 * instance image pinned by digest (built offline, pushed to the test registry), and in checkouts where no Docker
 * answers. The SWE-bench path (an imported task validated in its mirrored image) is in images.test.ts.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import type { GradeBackend } from "../../actors/grader-supervisor/backends/types.js";
import { infraFailure } from "../../actors/grader-supervisor/backends/types.js";
import { validateAndRecord } from "../../actors/grader-supervisor/validate.js";
import { loadTaskLibrary } from "../../actors/planner/library.js";
import { planRun, type Rejection } from "../../actors/planner/plan.js";
import { validateEnv } from "../../cli/commands/validate-env.js";
import type { ContainerRuntime } from "../../containers/index.js";
import { silentLogger } from "../../lib/log.js";
import { RunConfigSchema } from "../../protocol/config.js";
import { openDb } from "../../store/db.js";
import { getTaskValidation, getTaskValidations, invalidTaskIds } from "../../store/grades.js";
import { listImages } from "../../store/images.js";
import { type FreshDb, freshDb } from "../helpers/db.js";
import { testBaseImage, testRegistry, testRootfs, testRuntime } from "../helpers/docker.js";

const ROOT = path.resolve(import.meta.dirname, "../..");
const EXAMPLES = path.join(ROOT, "examples/tasks");
const BROKEN = path.join(ROOT, "test/fixtures/tasks-broken");
const SAMPLES = ["sample-calc-add", "sample-ranges-sum", "sample-strings-title"];
const log = silentLogger();

let fdb: FreshDb;
let rt: ContainerRuntime;
let dockerHost: string;
let images: { registry: string; baseRootfs: string };

before(async () => {
  fdb = await freshDb("validate-env");
  ({ runtime: rt, dockerHost } = await testRuntime());
  images = { registry: await testRegistry(), baseRootfs: await testRootfs() };
  await testBaseImage();
});

after(async () => {
  await fdb?.cleanup();
});

/** Validate a task library in containers, its images built here: each task's result by id. */
async function inContainers(tasks: string) {
  const env = { ...process.env, DOCKER_HOST: dockerHost };
  const results = await validateEnv({ tasks, db: fdb.db, log, env, images, runtime: rt, build: true });
  return new Map(results.map((r) => [r.taskId, r]));
}

describe("validate-env", () => {
  it("in containers: each sample task valid in its built image, recorded with that image and its digest", async () => {
    const byId = await inContainers(EXAMPLES);
    const built = new Map(
      (await listImages(fdb.db))
        .filter((i) => i.kind === "built")
        .map((i) => [i.taskId, `${i.name}@${i.digest}`] as const),
    );
    for (const id of SAMPLES) {
      const r = byId.get(id);
      assert.equal(r?.verdict, "valid", `${id}: ${r?.reason}`);
      assert.equal(r?.backend, "docker");
      const row = await getTaskValidation(fdb.db, id);
      assert.equal(row?.valid, true);
      assert.equal(row?.backend, "docker");
      assert.equal(row?.imageRef, built.get(id), "validated in the image the images table holds for it");
      assert.ok(row?.imageRef?.startsWith(`${images.registry}/evalfleet/task-`));
      assert.equal(row?.imageRef?.split("@")[1], row?.imageDigest);
    }
    // open_ended tasks are judged, nothing to validate, no row.
    assert.equal(byId.get("sample-explain-design")?.verdict, "skipped");
    assert.equal(await getTaskValidation(fdb.db, "sample-explain-design"), null);
  });

  it("a gold patch that does not fix its test, and a task the empty patch resolves, are invalid in containers", async () => {
    const byId = await inContainers(BROKEN);
    assert.equal(byId.get("broken-gold")?.verdict, "invalid");
    assert.equal(byId.get("broken-gold")?.backend, "docker");
    assert.match(byId.get("broken-gold")?.reason ?? "", /gold patch does not resolve.*double_two/);
    assert.equal(byId.get("broken-already-passes")?.verdict, "invalid");
    assert.match(byId.get("broken-already-passes")?.reason ?? "", /empty patch already resolves/);
    const row = await getTaskValidation(fdb.db, "broken-gold");
    assert.equal(row?.valid, false);
    assert.match(row?.reason ?? "", /RESOLVED_NO/);
    assert.deepEqual([...(await invalidTaskIds(fdb.db))].sort(), ["broken-already-passes", "broken-gold"]);
    // The planner refuses a run naming the broken task, with the validator's reason.
    const config = RunConfigSchema.parse({
      name: "broken-run",
      harnesses: [{ name: "h", adapter: "command" }],
      models: [{ name: "m", prices: { input_per_mtok: 1, output_per_mtok: 2 } }],
      tasks: ["broken-gold"],
      task_library_path: BROKEN,
    });
    await assert.rejects(
      planRun(config, [BROKEN], (ids) => getTaskValidations(fdb.db, ids)),
      (err: Rejection) => {
        assert.equal(err.issues[0]?.path, "tasks: broken-gold");
        assert.match(
          err.issues[0]?.reason ?? "",
          /^invalid \(validated .*\): gold patch does not resolve the task: RESOLVED_NO/,
        );
        return true;
      },
    );
  });

  it("an environment that fails while validating leaves the task unvalidated, never marked invalid", async () => {
    const failing: GradeBackend = {
      name: "failing",
      grade: async () => infraFailure("runtime", "the container runtime went away"),
    };
    const task = (await loadTaskLibrary(EXAMPLES)).tasks.get("sample-calc-add")!;
    const db = await freshDb("validate-env-infra");
    try {
      const [r] = await validateAndRecord(db.db, [task], {
        graders: { local: failing, docker: failing },
        libraryDir: EXAMPLES,
      });
      assert.equal(r?.verdict, "error");
      assert.match(String(r?.reason), /not validated: gold patch: environment failure \(runtime\)/);
      assert.equal(
        await getTaskValidation(db.db, "sample-calc-add"),
        null,
        "nothing is recorded of the task",
      );
    } finally {
      await db.cleanup();
    }
  });

  it("without Docker the folder tasks are validated in checkouts, and the record says so", async () => {
    const scratch = await freshDb("validate-env-checkout");
    try {
      const results = await validateEnv({
        tasks: EXAMPLES,
        db: scratch.db,
        log,
        env: process.env,
        images,
        runtime: null,
      });
      for (const id of SAMPLES) {
        const r = results.find((x) => x.taskId === id);
        assert.deepEqual([r?.verdict, r?.backend], ["valid", "local"], `${id}: ${r?.reason}`);
        const row = await getTaskValidation(scratch.db, id);
        assert.deepEqual([row?.backend, row?.imageRef], ["local", null]);
        assert.match(row?.imageDigest ?? "", /^sha256:[0-9a-f]{64}$/);
      }
    } finally {
      await scratch.cleanup();
    }
  });

  it("`evalfleet validate-env --tasks DIR --build --json --manifest` records rows and the images to pre-pull", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "validate-env-cli-"));
    try {
      const { DATABASE_URL: _pg, NODE_TEST_CONTEXT: _t, ...rest } = process.env;
      const manifest = path.join(dir, "images.json");
      const { stdout } = await promisify(execFile)(
        process.execPath,
        [
          "--import",
          "tsx",
          "cli/main.ts",
          "validate-env",
          "--tasks",
          EXAMPLES,
          "--build",
          "--registry",
          images.registry,
          "--rootfs",
          images.baseRootfs,
          "--json",
          "--manifest",
          manifest,
          "--data-dir",
          path.join(dir, "pglite"),
        ],
        { cwd: ROOT, env: { ...rest, DOCKER_HOST: dockerHost } },
      );
      const lines = stdout
        .trim()
        .split("\n")
        .map(
          (l) =>
            JSON.parse(l) as {
              taskId: string;
              verdict: string;
              backend: string | null;
              reason: string | null;
            },
        );
      const why = lines.map((l) => `${l.taskId}: ${l.verdict} ${l.reason ?? ""}`).join("\n");
      assert.deepEqual(
        lines.map((l) => [l.taskId, l.verdict, l.backend]).sort(),
        [
          ["sample-calc-add", "valid", "docker"],
          ["sample-explain-design", "skipped", null],
          ["sample-ranges-sum", "valid", "docker"],
          ["sample-strings-title", "valid", "docker"],
        ],
        why,
      );
      const pre = JSON.parse(await readFile(manifest, "utf8")) as {
        images: Array<{ instance_id: string; image: string }>;
      };
      assert.deepEqual(pre.images.map((i) => i.instance_id).sort(), SAMPLES);
      const db = await openDb({ dataDir: path.join(dir, "pglite") });
      try {
        for (const i of pre.images)
          assert.equal((await getTaskValidation(db, i.instance_id))?.imageRef, i.image);
      } finally {
        await db.close();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
