/**
 * The harness sees only the base commit, and nothing it writes into git can run code or change what is collected.
 * Each test plants one thing a hostile harness could (a later-history leak path, an fsmonitor, a filter driver, a
 * hook path, an include, a replaced `.git`, symlinks, a nested repository) and fails when the hole is reopened.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { chmod, mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { TaskSpecSchema } from "../../protocol/config.js";
import { readHarnessFile } from "../../task/harness-files.js";
import { collectPatch, type PreparedWorkdir, prepareWorkdir } from "../../task/index.js";
import { readyForSession } from "../../task/workdir.js";

const git = (cwd: string, ...args: string[]) =>
  execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", ...args], {
    cwd,
    stdio: "pipe",
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: cwd, GIT_CONFIG_NOSYSTEM: "1" },
  })
    .toString()
    .trim();

/** Every file under `dir`, recursively (symlinks not followed). */
function walk(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) out.push(...walk(p));
    else out.push(p);
  }
  return out;
}

describe("sealed git: the harness sees only the base, and patch collection runs nothing it wrote", {
  timeout: 120_000,
}, () => {
  let tmp: string;
  let src: string;
  let mirrors: string;
  let base: string;
  let fix: string;
  let fixBlob: string;
  let n = 0;
  before(async () => {
    tmp = await mkdtemp(join(tmpdir(), "ef-sealed-git-"));
    src = join(tmp, "upstream");
    await mkdir(join(src, "pkg"), { recursive: true });
    git(tmp, "init", "-q", "-b", "main", src);
    await writeFile(join(src, "pkg", "a.py"), "def f():\n    return 1\n");
    await writeFile(join(src, "README"), "widget\n");
    git(src, "add", "-A");
    git(src, "commit", "-q", "-m", "first");
    await writeFile(join(src, "README"), "widget, now with docs\n");
    git(src, "commit", "-qam", "second");
    base = git(src, "rev-parse", "HEAD");
    await writeFile(join(src, "pkg", "a.py"), "def f():\n    return 2  # THE-FIX\n");
    git(src, "commit", "-qam", "the fix");
    fix = git(src, "rev-parse", "HEAD");
    fixBlob = git(src, "rev-parse", "HEAD:pkg/a.py");
    git(src, "tag", "v2");
    git(src, "branch", "fix-branch");
    git(src, "update-ref", "refs/pull/1/head", fix);
    git(src, "pack-refs", "--all");
    mirrors = join(tmp, "mirrors");
    await mkdir(mirrors, { recursive: true });
    git(mirrors, "clone", "-q", "--mirror", src, "acme__widget.git");
  });
  after(async () => {
    await rm(tmp, { recursive: true, force: true });
  });

  const prepare = (): Promise<PreparedWorkdir> =>
    prepareWorkdir({
      ref: { run: "sealed", cell: `c${++n}`, attempt: 0 },
      task: TaskSpecSchema.parse({ id: "acme__widget-1", repo: "acme/widget", base_commit: base }),
      libraryDir: tmp,
      workRoot: join(tmp, "work"),
      mirrorRoot: mirrors,
    });

  const collect = (wd: PreparedWorkdir) =>
    collectPatch({
      worktree: wd.dirs.repo,
      gitDir: wd.dirs.baseGitDir,
      baseCommit: wd.baseCommit,
      scratchDir: wd.dirs.taskDir,
    }).then((p) => p.bytes.toString("utf8"));

  test("the workdir holds the base tree and one root commit: no alternates, later objects, refs, reflogs or mirror", async () => {
    const wd = await prepare();
    const repo = wd.dirs.repo;
    assert.equal(readFileSync(join(repo, "README"), "utf8"), "widget, now with docs\n");
    assert.equal(git(repo, "rev-parse", "HEAD^{tree}"), git(src, "rev-parse", `${base}^{tree}`));
    assert.equal(existsSync(join(repo, ".git", "objects", "info", "alternates")), false, "no alternates");
    assert.equal(existsSync(join(repo, ".git", "packed-refs")), false, "no packed refs");
    assert.equal(existsSync(join(repo, ".git", "logs")), false, "no reflogs");
    assert.equal(existsSync(join(repo, ".git", "shallow")), false, "not a shallow clone of anything");
    assert.equal(git(repo, "for-each-ref", "--format=%(refname)"), "refs/heads/main");
    assert.equal(git(repo, "rev-list", "--all", "--count"), "1", "one commit, no history before or after");
    assert.equal(git(repo, "log", "--format=%P"), "", "a root commit: no parent to follow");
    assert.equal(git(repo, "remote"), "");
    assert.equal(git(repo, "stash", "list"), "");
    // Every object git can find, packed or loose: exactly the base tree's and the one commit.
    const all = git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)");
    const objects = all.split("\n").map((l) => l.split(" "));
    const expected = git(src, "rev-list", "--objects", `${base}^{tree}`)
      .split("\n")
      .map((l) => l.split(" ")[0]);
    assert.deepEqual(
      objects
        .filter(([, t]) => t !== "commit")
        .map(([o]) => o)
        .sort(),
      [...expected].sort(),
    );
    assert.deepEqual(
      objects.filter(([, t]) => t === "commit").map(([o]) => o),
      [wd.baseCommit],
    );
    for (const missing of [fix, fixBlob, base])
      assert.throws(() => git(repo, "cat-file", "-e", missing), `object ${missing} must not be reachable`);
    assert.doesNotMatch(all, new RegExp(fixBlob));
    // Nothing under the attempt's harness folder names the mirror, the upstream repository or the task's own git dir.
    for (const f of walk(wd.dirs.harnessRoot)) {
      if (statSync(f).isFile()) {
        const text = readFileSync(f).toString("latin1");
        for (const secret of [mirrors, src, wd.dirs.baseGitDir, "THE-FIX"])
          assert.equal(text.includes(secret), false, `${f} mentions ${secret}`);
      }
    }
    // The trusted copy agrees and is just as bare of history.
    assert.equal(git(wd.dirs.baseGitDir, "rev-list", "--all", "--count"), "1");
    assert.throws(() => git(wd.dirs.baseGitDir, "cat-file", "-e", fixBlob));
  });

  test("a harness-written fsmonitor, filter, diff driver, hooksPath and include run nothing during collection", async () => {
    const wd = await prepare();
    const repo = wd.dirs.repo;
    const marker = join(tmp, `ran-${n}`);
    const evil = join(tmp, `evil-${n}.sh`);
    await writeFile(evil, `#!/bin/sh\necho "$0 $*" >> ${marker}\n`);
    await chmod(evil, 0o755);
    const included = join(tmp, `included-${n}.cfg`);
    await writeFile(included, `[core]\n\tfsmonitor = ${evil}\n`);
    await mkdir(join(repo, ".git", "hooks"), { recursive: true });
    await writeFile(join(repo, ".git", "hooks", "post-index-change"), `#!/bin/sh\n${evil}\n`);
    await chmod(join(repo, ".git", "hooks", "post-index-change"), 0o755);
    await writeFile(
      join(repo, ".git", "config"),
      [
        "[core]",
        `\tfsmonitor = ${evil}`,
        `\thooksPath = ${join(repo, ".git", "hooks")}`,
        "\tuntrackedCache = true",
        `[include]\n\tpath = ${included}`,
        `[filter "evil"]\n\tclean = ${evil} clean\n\tsmudge = ${evil} smudge\n\tprocess = ${evil} process\n\trequired = true`,
        `[diff "evil"]\n\ttextconv = ${evil} textconv\n\tcommand = ${evil} diff`,
        `[diff]\n\texternal = ${evil}`,
        "",
      ].join("\n"),
    );
    await writeFile(join(repo, ".gitattributes"), "* filter=evil diff=evil\n");
    await writeFile(join(repo, ".git", "info-attributes"), "* filter=evil\n");
    await writeFile(join(repo, "pkg", "a.py"), "def f():\n    return 3\n");
    await writeFile(join(repo, "new.txt"), "hello\n");
    const patch = await collect(wd);
    assert.equal(
      existsSync(marker),
      false,
      `harness-written config ran: ${existsSync(marker) ? readFileSync(marker, "utf8") : ""}`,
    );
    assert.match(patch, /\+ {4}return 3/);
    assert.match(patch, /\+hello/);
    assert.match(patch, /\+\* filter=evil diff=evil/, "the attributes file is content: collected as written");
  });

  test("a .git replaced by a file pointing elsewhere, a nested repository with an fsmonitor and symlinks", async () => {
    const wd = await prepare();
    const repo = wd.dirs.repo;
    const marker = join(tmp, `ran-${n}`);
    const evil = join(tmp, `evil-${n}.sh`);
    await writeFile(evil, `#!/bin/sh\necho ran >> ${marker}\n`);
    await chmod(evil, 0o755);
    // A git dir of the harness's choosing (here: the mirror itself, with an fsmonitor of its own added).
    const elsewhere = join(tmp, `elsewhere-${n}.git`);
    git(tmp, "clone", "-q", "--bare", join(mirrors, "acme__widget.git"), elsewhere);
    git(elsewhere, "config", "core.fsmonitor", evil);
    await rm(join(repo, ".git"), { recursive: true, force: true });
    await writeFile(join(repo, ".git"), `gitdir: ${elsewhere}\n`);
    // A nested repository whose config names the fsmonitor.
    await mkdir(join(repo, "vendor"), { recursive: true });
    git(join(repo, "vendor"), "init", "-q");
    git(join(repo, "vendor"), "config", "core.fsmonitor", evil);
    await writeFile(join(repo, "vendor", "v.txt"), "v\n");
    // Symlinks out of the tree: collected as links, never followed.
    await symlink("/etc/passwd", join(repo, "passwd-link"));
    await symlink("/etc", join(repo, "etc-link"));
    await writeFile(join(repo, "pkg", "a.py"), "def f():\n    return 4\n");
    const patch = await collect(wd);
    assert.equal(existsSync(marker), false, "a .git pointing elsewhere or a nested repo's config ran");
    assert.match(patch, /\+ {4}return 4/);
    assert.match(patch, /new file mode 120000[\s\S]*\+\/etc\/passwd/);
    assert.doesNotMatch(patch, /root:x:0:0/, "a symlink's target is never read");
    assert.doesNotMatch(patch, /THE-FIX/, "nothing of the git dir the .git file names is used");
  });

  test("a workdir replaced by a symlink is refused; harness files are read only as real files inside the attempt", async () => {
    const wd = await prepare();
    const { repo, out, home } = wd.dirs;
    await rm(repo, { recursive: true, force: true });
    await symlink(src, repo);
    await assert.rejects(collect(wd), /replaced its working directory/);
    await assert.rejects(readyForSession(wd.dirs, 1), /replaced its working directory/);

    await symlink("/etc/passwd", join(out, "harness-trajectory.jsonl"));
    assert.equal(await readHarnessFile(join(out, "harness-trajectory.jsonl"), [wd.dirs.harnessRoot]), null);
    await writeFile(join(out, "real.jsonl"), '{"ok":1}\n');
    assert.equal(await readHarnessFile(join(out, "real.jsonl"), [wd.dirs.harnessRoot]), '{"ok":1}\n');
    assert.equal(await readHarnessFile("/etc/passwd", [wd.dirs.harnessRoot]), null, "outside the roots");
    execFileSync("mkfifo", [join(out, "fifo")]);
    assert.equal(await readHarnessFile(join(out, "fifo"), [wd.dirs.harnessRoot]), null, "a FIFO never hangs");
    // A folder on the way that became a link.
    await rm(out, { recursive: true, force: true });
    await symlink("/etc", out);
    assert.equal(await readHarnessFile(join(out, "passwd"), [wd.dirs.harnessRoot]), null);
    // HOME planted with a link to a host folder is made anew before the next session writes config into it.
    await rm(home, { recursive: true, force: true });
    await symlink(tmp, home);
    await rm(repo);
    await mkdir(repo);
    await readyForSession(wd.dirs, 1);
    for (const d of [home, out]) assert.equal(statSync(d).isDirectory(), true);
    assert.deepEqual(readdirSync(home), []);
  });
});
