/**
 * `evalfleet images build | mirror | list` against the test daemon and registries: the sample tasks' images built
 * offline, pushed to the private registry and recorded by digest (in the database and the Packer manifest); an
 * official-named SWE-bench image mirrored from a second registry standing in for the source; an imported SWE-bench
 * task then validated in its mirror (gold resolves, the empty patch does not), with what it graded in recorded.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { validateEnv } from "../../cli/commands/validate-env.js";
import type { ContainerRuntime } from "../../containers/index.js";
import { buildTaskImage } from "../../images/build.js";
import { officialImageName } from "../../images/mirror.js";
import { git } from "../../images/testbed.js";
import { silentLogger } from "../../lib/log.js";
import { type Db, openDb } from "../../store/db.js";
import { getTaskValidation } from "../../store/grades.js";
import { listImages } from "../../store/images.js";
import { migrate } from "../../store/migrations.js";
import {
  startScratchRegistry,
  testBaseImage,
  testRegistry,
  testRootfs,
  testRuntime,
} from "../helpers/docker.js";

const ROOT = path.resolve(import.meta.dirname, "../..");
const EXAMPLES = path.join(ROOT, "examples/tasks");
const INSTANCE = "psf__requests-90001";
const run = promisify(execFile);

let rt: ContainerRuntime;
let dockerHost: string;
let registry: string;
let rootfs: string;
let source: Awaited<ReturnType<typeof startScratchRegistry>>;
let work: string;
let dataDir: string;

/** `evalfleet …` as a user runs it: its own process, the test daemon, the embedded database of this file. */
async function cli(args: string[], db = true): Promise<string> {
  const { DATABASE_URL: _pg, NODE_TEST_CONTEXT: _t, ...env } = process.env;
  const { stdout } = await run(
    process.execPath,
    ["--import", "tsx", "cli/main.ts", ...args, ...(db ? ["--data-dir", dataDir] : [])],
    {
      cwd: ROOT,
      env: { ...env, DOCKER_HOST: dockerHost },
      maxBuffer: 16 * 1024 * 1024,
    },
  );
  return stdout;
}

async function withDb<T>(fn: (db: Db) => Promise<T>): Promise<T> {
  const db = await openDb({ dataDir });
  try {
    await migrate(db);
    return await fn(db);
  } finally {
    await db.close();
  }
}

const jsonLines = (out: string) =>
  out
    .trim()
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, string>);

/**
 * A SWE-bench-shaped instance of a repository the official spec table knows (psf/requests: `pytest -rA`, the
 * pytest parser): a tiny Python project at a base commit, a test patch adding the tests, a gold patch fixing it.
 */
async function fakeInstance(): Promise<{ repo: string; record: Record<string, unknown> }> {
  const repo = path.join(work, "requests-src");
  await mkdir(repo, { recursive: true });
  await writeFile(path.join(repo, "feature.py"), "def double(x):\n    return x * 3\n");
  await writeFile(path.join(repo, "conftest.py"), "");
  await git(repo, ["init", "-q"]);
  await git(repo, ["add", "-A"]);
  await git(repo, ["commit", "-q", "-m", "base"]);
  const base = await git(repo, ["rev-parse", "HEAD"]);
  await mkdir(path.join(repo, "tests"));
  await writeFile(
    path.join(repo, "tests/test_feature.py"),
    "from feature import double\n\n\ndef test_double():\n    assert double(2) == 4\n\n\ndef test_zero():\n    assert double(0) == 0\n",
  );
  await git(repo, ["add", "-A"]);
  const testPatch = `${await git(repo, ["diff", "--cached"])}\n`;
  await git(repo, ["reset", "-q", "--hard", base]);
  await writeFile(path.join(repo, "feature.py"), "def double(x):\n    return x * 2\n");
  const gold = `${await git(repo, ["diff"])}\n`;
  await git(repo, ["checkout", "-q", "--", "feature.py"]);
  return {
    repo,
    record: {
      instance_id: INSTANCE,
      repo: "psf/requests",
      base_commit: base,
      version: "2.0",
      problem_statement: "double(2) returns 6",
      patch: gold,
      test_patch: testPatch,
      FAIL_TO_PASS: JSON.stringify(["tests/test_feature.py::test_double"]),
      PASS_TO_PASS: JSON.stringify(["tests/test_feature.py::test_zero"]),
      created_at: "2024-01-01T00:00:00Z",
    },
  };
}

before(async () => {
  ({ runtime: rt, dockerHost } = await testRuntime());
  registry = await testRegistry();
  rootfs = await testRootfs();
  await testBaseImage();
  source = await startScratchRegistry();
  work = await mkdtemp(path.join(tmpdir(), "ef-images-"));
  dataDir = path.join(work, "pglite");
});

after(async () => {
  await source?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

describe("evalfleet images", () => {
  it("build: each sample task's image pushed to the registry, recorded by digest, in the Packer manifest", async () => {
    const manifestFile = path.join(work, "built.json");
    const build = [
      "images",
      "build",
      "--tasks",
      EXAMPLES,
      "--registry",
      registry,
      "--rootfs",
      rootfs,
      "--json",
    ];
    const out = await cli([...build, "--manifest", manifestFile]);
    const built = jsonLines(out);
    assert.deepEqual(built.map((b) => b.task).sort(), [
      "sample-calc-add",
      "sample-ranges-sum",
      "sample-strings-title",
    ]);
    for (const b of built)
      assert.match(b.image ?? "", new RegExp(`^${registry}/evalfleet/task-[a-z0-9-]+@sha256:[0-9a-f]{64}$`));
    const manifest = JSON.parse(await readFile(manifestFile, "utf8")) as {
      images: Array<{ instance_id: string; image: string }>;
    };
    assert.deepEqual(manifest.images.map((i) => i.image).sort(), built.map((b) => b.image).sort());
    const recorded = await withDb((db) => listImages(db));
    assert.deepEqual(
      recorded
        .filter((r) => r.kind === "built")
        .map((r) => `${r.name}@${r.digest}`)
        .sort(),
      built.map((b) => b.image).sort(),
    );
    // The registry holds each manifest under exactly that digest.
    for (const b of built) {
      const [name, digest] = (b.image as string).slice(registry.length + 1).split("@");
      const r = await fetch(`http://${registry}/v2/${name}/manifests/${digest}`, {
        method: "HEAD",
        headers: { accept: "application/vnd.docker.distribution.manifest.v2+json" },
      });
      assert.equal(r.status, 200, b.image);
    }
    // Built again: nothing changes, the same digests.
    const again = jsonLines(await cli(build));
    assert.deepEqual(again.map((b) => [b.image, b.built]).sort(), built.map((b) => [b.image, false]).sort());
  });

  it("mirror: the official image of an instance copied from a source registry into the private one", async () => {
    const { repo, record } = await fakeInstance();
    const local = await buildTaskImage(
      rt,
      {
        taskId: INSTANCE,
        instanceId: INSTANCE,
        source: repo,
        baseCommit: record.base_commit as string,
        sourceKey: "swe-fixture",
      },
      { base: (await testBaseImage()).ref },
    );
    const official = `${source.addr}/${officialImageName(INSTANCE)}:latest`;
    assert.match(official, /swebench\/sweb\.eval\.x86_64\.psf_1776_requests-90001:latest$/);
    await rt.tag(local.digest, official);
    const sourceDigest = await rt.push(official);
    await writeFile(path.join(work, "instances.jsonl"), `${JSON.stringify(record)}\n`);

    const out = await cli([
      "images",
      "mirror",
      "--instance",
      INSTANCE,
      "--from",
      source.addr,
      "--registry",
      registry,
      "--manifest",
      path.join(work, "mirrored.json"),
      "--json",
    ]);
    const [m] = jsonLines(out);
    assert.equal(m?.image, `${registry}/${officialImageName(INSTANCE)}@${sourceDigest}`);
    assert.equal(m?.source, `${source.addr}/${officialImageName(INSTANCE)}@${sourceDigest}`);
    const listed = jsonLines(await cli(["images", "list", "--json"]));
    assert.ok(
      listed.some((r) => r.kind === "mirrored" && r.instanceId === INSTANCE && r.digest === sourceDigest),
    );
  });

  it("tasks import pins the image by digest from a mirror's manifest", async () => {
    const lib = path.join(work, "swe-pinned");
    const out = await cli(
      [
        "tasks",
        "import",
        path.join(work, "instances.jsonl"),
        lib,
        "--images",
        path.join(work, "mirrored.json"),
      ],
      false,
    );
    assert.match(out, /wrote 1 task\(s\) .*1 with an image pinned by digest/);
    const yaml = await readFile(path.join(lib, `${INSTANCE}.yaml`), "utf8");
    assert.ok(
      yaml.includes(`\nimage: ${registry}/${officialImageName(INSTANCE)}@sha256:`),
      `the task names its mirror by digest:\n${yaml}`,
    );
  });

  it("an imported SWE-bench task validates in its mirrored image, and the record says what it graded in", async () => {
    const lib = path.join(work, "swe-tasks");
    const out = await cli(["tasks", "import", path.join(work, "instances.jsonl"), lib], false);
    assert.match(out, /0 with an image pinned by digest\nnext: mirror their images/);
    const results = await withDb((db) =>
      validateEnv({
        tasks: lib,
        db,
        log: silentLogger(),
        env: { ...process.env, DOCKER_HOST: dockerHost },
        images: { registry, baseRootfs: rootfs },
        runtime: rt,
      }),
    );
    const [r] = results;
    assert.equal(r?.verdict, "valid", r?.reason ?? "");
    assert.equal(r?.backend, "docker");
    const mirrored = `${registry}/${officialImageName(INSTANCE)}`;
    assert.equal(r?.image, mirrored);
    const row = await withDb((db) => getTaskValidation(db, INSTANCE));
    assert.equal(row?.valid, true);
    assert.equal(row?.backend, "docker");
    assert.equal(row?.imageRef, `${mirrored}@${r?.imageDigest}`);
    assert.match(row?.taskHash ?? "", /^[0-9a-f]{64}$/);
  });
});
