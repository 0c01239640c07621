/** Gold validation on the repository's sample tasks and on deliberately broken ones. */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import type { GradeBackend, GradeOutcome } from "../../actors/grader-supervisor/backends/types.js";
import { getTaskValidation, invalidTaskIds } from "../../actors/grader-supervisor/records.js";
import { prepareTaskJob } from "../../actors/grader-supervisor/task-job.js";
import { imageManifest, validateAndRecord } from "../../actors/grader-supervisor/validate.js";
import { TaskSpecSchema } from "../../protocol/config.js";
import { silentLogger } from "../../protocol/log.js";
import { validateEnv } from "../../scripts/commands/validate-env.js";
import { openDb } from "../../store/db.js";
import { type FreshDb, freshDb } from "../helpers/db.js";

const ROOT = path.resolve(import.meta.dirname, "../..");
const EXAMPLES = path.join(ROOT, "examples/tasks");
const BROKEN = path.join(ROOT, "test/fixtures/tasks-broken");
const log = silentLogger();

let fdb: FreshDb;

before(async () => {
  fdb = await freshDb("validate-env");
});

after(async () => {
  await fdb?.cleanup();
});

describe("validate-env", () => {
  it("the sample tasks are valid, recorded with the digest they were validated on", async () => {
    const results = await validateEnv({ tasks: EXAMPLES, db: fdb.db, log });
    const byId = new Map(results.map((r) => [r.taskId, r]));
    for (const id of ["sample-calc-add", "sample-ranges-sum", "sample-strings-title"]) {
      assert.equal(byId.get(id)?.verdict, "valid", `${id}: ${byId.get(id)?.reason}`);
      const row = await getTaskValidation(fdb.db, id);
      assert.equal(row?.valid, true);
      assert.equal(row?.reason, null);
      assert.match(row?.imageDigest ?? "", /^sha256:[0-9a-f]{64}$/);
    }
    // open_ended tasks are judged, nothing to validate, no row.
    assert.equal(byId.get("sample-explain-design")?.verdict, "skipped");
    assert.equal(await getTaskValidation(fdb.db, "sample-explain-design"), null);
  });

  it("a gold patch that does not fix its test, and a task the empty patch resolves, are invalid", async () => {
    const results = await validateEnv({ tasks: BROKEN, db: fdb.db, log });
    const byId = new Map(results.map((r) => [r.taskId, r]));
    assert.equal(byId.get("broken-gold")?.verdict, "invalid");
    assert.match(byId.get("broken-gold")?.reason ?? "", /gold patch does not resolve.*double_two/);
    assert.equal(byId.get("broken-already-passes")?.verdict, "invalid");
    assert.match(byId.get("broken-already-passes")?.reason ?? "", /empty patch already resolves/);
    const row = await getTaskValidation(fdb.db, "broken-gold");
    assert.equal(row?.valid, false);
    assert.match(row?.reason ?? "", /RESOLVED_NO/);
    assert.deepEqual([...(await invalidTaskIds(fdb.db))].sort(), ["broken-already-passes", "broken-gold"]);
  });

  it("a docker task is validated on a resolved digest, and grading then uses that digest", async () => {
    const digest = `sha256:${"ab".repeat(32)}`;
    const task = TaskSpecSchema.parse({
      id: "astropy__astropy-1",
      repo: "astropy/astropy",
      base_commit: "abc123",
      version: "5.0",
      image: "swebench/sweb.eval.x86_64.astropy_1776_astropy-1",
      FAIL_TO_PASS: ["t::a"],
      PASS_TO_PASS: [],
      patch: "diff --git a/x b/x\n",
    });
    const seen: Array<{ patch: string | null; digest: string | undefined }> = [];
    const docker: GradeBackend = {
      name: "docker",
      grade: async (job): Promise<GradeOutcome> => {
        seen.push({ patch: job.patch, digest: job.image?.digest });
        const resolved = job.patch !== "";
        return {
          kind: "graded",
          resolved,
          status: resolved ? "RESOLVED_FULL" : "RESOLVED_NO",
          report: {},
          testOutput: "",
        };
      },
    };
    const [r] = await validateAndRecord(fdb.db, [task], {
      graders: { docker, local: docker },
      libraryDir: ROOT,
      resolveDigest: async () => digest,
    });
    assert.equal(r?.verdict, "valid");
    assert.deepEqual(seen, [
      { patch: task.patch, digest },
      { patch: "", digest },
    ]);
    const row = await getTaskValidation(fdb.db, task.id);
    assert.equal(row?.imageDigest, digest);
    const prepared = await prepareTaskJob(task, "p", {
      libraryDir: ROOT,
      validatedDigest: row?.imageDigest ?? null,
    });
    assert.deepEqual(prepared.job.image, { name: task.image, digest });
    // What the eval-host AMI pre-pulls: the image pinned by the validated digest.
    assert.deepEqual(imageManifest([r!]), {
      images: [{ instance_id: task.id, image: `${task.image}@${digest}` }],
    });
  });

  it("`evalfleet validate-env --tasks DIR --json` records rows in the database", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "validate-env-cli-"));
    try {
      const { DATABASE_URL: _pg, NODE_TEST_CONTEXT: _t, ...env } = process.env;
      const { stdout } = await promisify(execFile)(
        process.execPath,
        ["--import", "tsx", "scripts/cli.ts", "validate-env", "--tasks", BROKEN, "--json", "--data-dir", dir],
        { cwd: ROOT, env },
      );
      const lines = stdout
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as { taskId: string; verdict: string });
      assert.deepEqual(lines.map((l) => [l.taskId, l.verdict]).sort(), [
        ["broken-already-passes", "invalid"],
        ["broken-gold", "invalid"],
      ]);
      const db = await openDb({ dataDir: dir });
      try {
        assert.deepEqual([...(await invalidTaskIds(db))].sort(), ["broken-already-passes", "broken-gold"]);
      } finally {
        await db.close();
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
