import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, statSync } from "node:fs";
import { cp, mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { describe, test } from "node:test";
import { TaskSpecSchema } from "../../protocol/config.js";
import { collectPatch, localMirror, prepareWorkdir } from "../../task/index.js";
import { tempDirForSuite } from "../helpers/suite.js";

const git = (cwd: string, ...args: string[]) =>
  execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", ...args], {
    cwd,
    stdio: "pipe",
  })
    .toString()
    .trim();

describe("attempt workdirs from the git mirror cache", { timeout: 60_000 }, () => {
  const tmp = tempDirForSuite("ef-task-wd-");

  test("a repo_path task gets one mirror, the grader's base commit, and a binary-safe patch that applies", async () => {
    const library = resolve("examples/tasks");
    const task = TaskSpecSchema.parse({ id: "calc", repo_path: "repos/calc", test_command: "node test.js" });
    const mirrors = join(tmp(), "mirrors");
    const ref = { run: "r/1", cell: "c:1", attempt: 1 };
    const inputs = { ref, task, libraryDir: library, workRoot: join(tmp(), "w"), mirrorRoot: mirrors };
    const wd = await prepareWorkdir(inputs);
    const again = await prepareWorkdir(inputs);
    assert.equal(again.baseCommit, wd.baseCommit, "same folder, same base commit");
    // The mirror is made once per content and reused: both workdirs came from the one mirror the folder has.
    const made = (await readdir(mirrors)).filter((f) => f.endsWith(".git"));
    assert.equal(made.length, 1, `one mirror for one source folder: ${made.join(", ")}`);
    assert.equal(await localMirror(join(library, "repos/calc"), mirrors), join(mirrors, made[0]!));
    // A source that changes is a new mirror (its content is in the name), never the stale one.
    const changed = join(tmp(), "changed-calc");
    await cp(join(library, "repos/calc"), changed, { recursive: true });
    await writeFile(join(changed, "NOTES.md"), "a later change\n");
    const other = await localMirror(changed, mirrors);
    assert.notEqual(other, join(mirrors, made[0]!));
    assert.equal((await readdir(mirrors)).filter((f) => f.endsWith(".git")).length, 2);
    // Same fixed identity and dates as the grader's fresh checkout: the base commit ids agree.
    const { freshCheckout } = await import("../../images/testbed.js");
    const grader = await freshCheckout(join(library, "repos/calc"));
    assert.equal(grader.baseCommit, wd.baseCommit);
    await rm(grader.root, { recursive: true, force: true });

    const repo = wd.dirs.repo;
    const binary = Buffer.from([0, 1, 2, 255, 254, 10, 0, 13, 10, 128]);
    await writeFile(join(repo, "blob.bin"), binary);
    await writeFile(
      join(repo, "calc.js"),
      (await readFile(join(repo, "calc.js"), "utf8")).replace(
        "a - b;\n}\n\nexport function sub",
        "a + b;\n}\n\nexport function sub",
      ),
    );
    await rm(join(repo, "package.json"));
    git(repo, "add", "calc.js");
    git(repo, "commit", "-q", "-m", "harness commit"); // committed changes are part of the patch too
    const patch = await collectPatch({
      worktree: repo,
      gitDir: wd.dirs.baseGitDir,
      baseCommit: wd.baseCommit,
      scratchDir: wd.dirs.taskDir,
    });
    const text = patch.bytes.toString("latin1");
    assert.match(text, /GIT binary patch/);
    assert.match(text, /deleted file mode/);
    assert.match(patch.sha256, /^[0-9a-f]{64}$/);

    const check = join(tmp(), "check");
    const fresh = await prepareWorkdir({
      ref: { ...ref, attempt: 2 },
      task,
      libraryDir: library,
      workRoot: check,
      mirrorRoot: mirrors,
    });
    await writeFile(join(tmp(), "p.diff"), patch.bytes);
    git(fresh.dirs.repo, "apply", "--binary", join(tmp(), "p.diff"));
    assert.deepEqual(readFileSync(join(fresh.dirs.repo, "blob.bin")), binary);
    assert.match(
      execFileSync("node", ["test.js"], { cwd: fresh.dirs.repo }).toString(),
      /PASSED test\.js::add_positive/,
    );
  });

  test("a SWE-bench task checks out base_commit from the mirror dir, with later history out of reach", async () => {
    const src = join(tmp(), "upstream");
    await mkdir(src, { recursive: true });
    git(src, "init", "-q", "-b", "main");
    await writeFile(join(src, "a.py"), "x = 1\n");
    git(src, "add", "-A");
    git(src, "commit", "-q", "-m", "base");
    const base = git(src, "rev-parse", "HEAD");
    await writeFile(join(src, "a.py"), "x = 2  # the fix\n");
    git(src, "commit", "-qam", "fix");
    git(src, "tag", "v1");
    const mirrors = join(tmp(), "swe-mirrors");
    await mkdir(mirrors, { recursive: true });
    git(mirrors, "clone", "-q", "--mirror", src, "acme__widget.git");
    const task = TaskSpecSchema.parse({ id: "acme__widget-1", repo: "acme/widget", base_commit: base });
    const wd = await prepareWorkdir({
      ref: { run: "r", cell: "c", attempt: 0 },
      task,
      libraryDir: tmp(),
      workRoot: join(tmp(), "swe-w"),
      mirrorRoot: mirrors,
    });
    // The base commit's tree, under a root commit of evalfleet's own: no upstream commit, no history.
    assert.equal(git(wd.dirs.repo, "rev-parse", "HEAD^{tree}"), git(src, "rev-parse", `${base}^{tree}`));
    assert.equal(await readFile(join(wd.dirs.repo, "a.py"), "utf8"), "x = 1\n");
    assert.equal(git(wd.dirs.repo, "log", "--all", "--format=%s"), "evalfleet base");
    assert.equal(git(wd.dirs.repo, "remote"), "");
    await assert.rejects(
      prepareWorkdir({
        ref: { run: "r", cell: "c2", attempt: 0 },
        task: TaskSpecSchema.parse({ id: "t2", repo: "acme/other", base_commit: base }),
        libraryDir: tmp(),
        workRoot: join(tmp(), "swe-w"),
        mirrorRoot: mirrors,
      }),
      /no git mirror of acme\/other/,
    );
  });

  test("a mirror on another filesystem than the workdir (an image layer and a task volume) still seeds it", async () => {
    // /dev/shm is a tmpfs of its own: a rename from there into the workdir fails with EXDEV, as it does on
    // Fargate between the image's mirror cache and the attempt's volume.
    const mirrors = await mkdtemp("/dev/shm/ef-task-wd-mirrors-");
    try {
      assert.notEqual(
        statSync(mirrors).dev,
        statSync(tmp()).dev,
        "the mirror and the workdir share a device",
      );
      const task = TaskSpecSchema.parse({
        id: "calc",
        repo_path: "repos/calc",
        test_command: "node test.js",
      });
      const wd = await prepareWorkdir({
        ref: { run: "xdev", cell: "c", attempt: 1 },
        task,
        libraryDir: resolve("examples/tasks"),
        workRoot: join(tmp(), "xdev"),
        mirrorRoot: mirrors,
      });
      assert.match(wd.baseCommit, /^[0-9a-f]{40}$/);
      assert.ok((await readdir(wd.dirs.repo)).includes("test.js"), "the checkout has the task's files");
    } finally {
      await rm(mirrors, { recursive: true, force: true });
    }
  });
});
