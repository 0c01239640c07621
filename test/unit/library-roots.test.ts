import assert from "node:assert/strict";
import { mkdir, mkdtemp, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { resolveLibraryDir } from "../../actors/planner/library.js";
import { loadLibrarySettings, SHIPPED_LIBRARY_ROOT } from "../../config/index.js";
import { ValidationError } from "../../protocol/errors.js";

const ROOT = resolve(import.meta.dirname, "../..");

describe("task library roots", () => {
  let dir: string;
  let rootA: string;
  let rootB: string;
  let outside: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "ef-roots-"));
    rootA = join(dir, "a");
    rootB = join(dir, "b");
    outside = join(dir, "outside");
    for (const d of [
      join(rootA, "only-a"),
      join(rootA, "both"),
      join(rootB, "both"),
      join(rootB, "lib"),
      outside,
    ])
      await mkdir(d, { recursive: true });
    await symlink(outside, join(rootB, "link-out"));
    await symlink(join(rootB, "lib"), join(rootA, "link-in"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  const refused = async (path: string, re: RegExp) => {
    await assert.rejects(resolveLibraryDir(path, [rootA, rootB]), (e: unknown) => {
      assert.ok(e instanceof ValidationError);
      assert.equal(e.issues[0]?.path, "task_library_path");
      assert.match(e.issues[0]!.reason, re);
      assert.match(e.issues[0]!.reason, new RegExp(`the task library roots are: ${rootA}, ${rootB}`));
      assert.match(e.issues[0]!.reason, /EVALFLEET_TASK_LIBRARY_ROOTS/);
      return true;
    });
  };

  it("a relative path is looked up under each root in order", async () => {
    assert.equal(await resolveLibraryDir("only-a", [rootA, rootB]), join(rootA, "only-a"));
    assert.equal(await resolveLibraryDir("lib", [rootA, rootB]), join(rootB, "lib"));
    assert.equal(await resolveLibraryDir("both", [rootB, rootA]), join(rootB, "both"), "the first root wins");
  });

  it("an absolute path inside a root is accepted; a link inside the roots to inside them too", async () => {
    assert.equal(await resolveLibraryDir(join(rootB, "lib"), [rootA, rootB]), join(rootB, "lib"));
    assert.equal(await resolveLibraryDir("link-in", [rootA, rootB]), join(rootB, "lib"));
  });

  it("a path outside every root is refused, listing the roots", async () => {
    await refused(outside, /is outside every task library root/);
    await refused("/etc", /\/etc is outside every task library root/);
    await refused("../outside", /leads outside every task library root/);
    await refused(join(rootA, "..", "outside"), /outside every task library root/);
  });

  it("a symbolic link inside a root cannot lead out of it", async () => {
    await refused("link-out", /leads outside every task library root \(to .*outside\)/);
    await refused(join(rootB, "link-out"), /outside every task library root/);
  });

  it("a library that exists nowhere says so", async () => {
    await refused("missing", /no folder "missing" exists under any task library root/);
  });

  it("by default the roots are the state folder's libraries/ and examples/ (not the working directory)", async () => {
    const roots = loadLibrarySettings({ env: {} }).roots;
    assert.deepEqual(roots, [resolve(".evalfleet", "libraries"), SHIPPED_LIBRARY_ROOT]);
    assert.ok(!roots.includes(process.cwd()), "a folder the planner happens to run in is not readable");
    assert.deepEqual(loadLibrarySettings({ env: { EVALFLEET_STATE_DIR: rootA } }).roots, [
      join(rootA, "libraries"),
      SHIPPED_LIBRARY_ROOT,
    ]);
    assert.equal(SHIPPED_LIBRARY_ROOT, join(ROOT, "examples"));
    // examples/sample-run.yaml says `task_library_path: tasks`, sent as is by `nats pub runs.submit`.
    assert.equal(await resolveLibraryDir("tasks", roots), join(ROOT, "examples", "tasks"));
    // `evalfleet submit` sends it absolute (next to the run file): inside the shipped root.
    assert.equal(
      await resolveLibraryDir(join(ROOT, "examples", "tasks"), roots),
      join(ROOT, "examples", "tasks"),
    );
    // The repository itself (the working directory here) is not a root.
    await assert.rejects(resolveLibraryDir(join(ROOT, "test"), roots), ValidationError);
  });

  it("EVALFLEET_TASK_LIBRARY_ROOTS replaces the defaults (comma-separated, made absolute)", () => {
    const roots = loadLibrarySettings({ env: { EVALFLEET_TASK_LIBRARY_ROOTS: `${rootA}, rel/x` } }).roots;
    assert.deepEqual(roots, [rootA, resolve("rel/x")]);
  });
});
