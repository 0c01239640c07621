/**
 * The attempt's working directory at the task's base commit. Repositories come from a local git mirror cache,
 * made once per repository and shared by every attempt on the machine. The harness never gets the mirror, a clone
 * of it or anything that points at it: its repository is built fresh, holding the base commit's tree and one root
 * commit of it — no alternates, no later (or earlier) objects, no other refs, no reflogs, no remote — so the fix
 * is nowhere it can look. A second copy of the same base, in a folder the harness is never shown, is the git dir
 * the patch is collected with. A re-run removes whatever an earlier attempt left.
 */
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { cp, lstat, mkdir, mkdtemp, readdir, readFile, rename, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import type { TaskSpec } from "../protocol/config.js";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import { attemptToken, safeSlug } from "../protocol/names.js";
import { git, gitText, SEALED_GIT_ENV } from "./git.js";
import type { TaskRef } from "./ref.js";

export interface AttemptDirs {
  /** root/<run>/<cell>: removed whole when an attempt of the cell starts */
  cellDir: string;
  /** cellDir/<attempt> */
  attemptDir: string;
  /** attemptDir/harness: everything the harness may see and write (a container's only mount) */
  harnessRoot: string;
  /** the checkout the harness works in */
  repo: string;
  /** HOME and config for the harness, outside the checkout */
  home: string;
  /** where the harness writes its own trajectory, outside the checkout */
  out: string;
  /** attemptDir/task: the task's own folder, never shown to the harness (trusted base, patch index, outputs) */
  taskDir: string;
  /** taskDir/base.git: the base commit the harness cannot touch; the patch is collected with this git dir */
  baseGitDir: string;
}

/** Where an attempt's folders are: deterministic, from safeSlug(run)/safeSlug(cell)/attempt. */
export function attemptDirs(root: string, ref: TaskRef): AttemptDirs {
  // Absolute: the harness folder is bind-mounted into a container by this path.
  const cellDir = path.join(path.resolve(root), safeSlug(ref.run), safeSlug(ref.cell));
  const attemptDir = path.join(cellDir, attemptToken(ref.attempt));
  const harnessRoot = path.join(attemptDir, "harness");
  const taskDir = path.join(attemptDir, "task");
  return {
    cellDir,
    attemptDir,
    harnessRoot,
    repo: path.join(harnessRoot, "repo"),
    home: path.join(harnessRoot, "home"),
    out: path.join(harnessRoot, "out"),
    taskDir,
    baseGitDir: path.join(taskDir, "base.git"),
  };
}

/** Every file under `dir` (not .git), sorted, as paths relative to it: what a task folder's content is. */
export async function listFiles(dir: string, rel = ""): Promise<string[]> {
  const out: string[] = [];
  const entries = await readdir(path.join(dir, rel), { withFileTypes: true });
  for (const e of entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
    if (e.name === ".git") continue;
    const p = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...(await listFiles(dir, p)));
    else if (e.isFile()) out.push(p);
  }
  return out;
}

/** A content digest of a folder: a changed task repository gets a new mirror, never a stale one. */
async function folderDigest(dir: string): Promise<string> {
  const h = createHash("sha256");
  for (const f of await listFiles(dir)) {
    h.update(`${f}\0`);
    h.update(await readFile(path.join(dir, f)));
    h.update("\0");
  }
  return h.digest("hex").slice(0, 16);
}

/**
 * Publish a finished mirror under its final name. Another task on the machine may have built the same mirror at the
 * same moment: whichever rename lands first wins and the other copy is dropped.
 */
async function install(tmp: string, final: string): Promise<void> {
  try {
    await rename(tmp, final);
  } catch (err) {
    await rm(tmp, { recursive: true, force: true });
    if (!existsSync(final)) throw err;
  }
}

/** A bare mirror of a task shipped as a folder (`repo_path`), committed once as the base. */
export async function localMirror(source: string, mirrorRoot: string): Promise<string> {
  if (!existsSync(source))
    throw new EvalfleetError(ErrorCode.NotFound, `the task's repo_path ${source} does not exist`);
  const final = path.join(
    mirrorRoot,
    `local-${safeSlug(path.basename(source), 60)}-${await folderDigest(source)}.git`,
  );
  if (existsSync(final)) return final;
  await mkdir(mirrorRoot, { recursive: true });
  const scratch = await mkdtemp(path.join(tmpdir(), "evalfleet-mirror-"));
  try {
    const work = path.join(scratch, "repo");
    await cp(source, work, { recursive: true, filter: (p) => path.basename(p) !== ".git" });
    await git(work, ["init", "-q"]);
    await git(work, ["add", "-A"]);
    await git(work, ["commit", "-q", "--allow-empty", "--no-verify", "-m", "evalfleet base"]);
    const tmp = `${final}.tmp-${randomBytes(4).toString("hex")}`;
    await git(scratch, ["clone", "-q", "--bare", work, tmp]);
    await install(tmp, final);
    return final;
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}

/** `<mirrorRoot>/owner__name.git`: one file name (no `/` survives), so it stays inside the mirror root. */
export function repoMirrorPath(mirrorRoot: string, repo: string): string {
  return path.join(mirrorRoot, `${repo.replace(/[/\\]/g, "__")}.git`);
}

/**
 * The mirror of a SWE-bench repository (`owner/name`): `<mirrorRoot>/owner__name.git` when it is there; otherwise,
 * only when `remoteBase` (the EVALFLEET_GIT_REMOTE_BASE setting) names a remote (e.g. https://github.com),
 * mirrored from it once.
 */
export async function repoMirror(
  repo: string,
  mirrorRoot: string,
  remoteBase: string | undefined,
): Promise<string> {
  const final = repoMirrorPath(mirrorRoot, repo);
  if (existsSync(final)) return final;
  if (!remoteBase)
    throw new EvalfleetError(
      ErrorCode.NotFound,
      `no git mirror of ${repo} at ${final}; put one there (git clone --mirror) or set EVALFLEET_GIT_REMOTE_BASE`,
    );
  await mkdir(mirrorRoot, { recursive: true });
  const tmp = `${final}.tmp-${randomBytes(4).toString("hex")}`;
  await git(
    mirrorRoot,
    ["clone", "-q", "--mirror", `${remoteBase.replace(/\/+$/, "")}/${repo}.git`, tmp],
    {},
    3_600_000,
  );
  await install(tmp, final);
  return final;
}

export interface PreparedWorkdir {
  dirs: AttemptDirs;
  /** the root commit of the base tree, the same id in the harness's repository and in `dirs.baseGitDir` */
  baseCommit: string;
}

/** git's empty tree: the base of an open-ended task that has no repository. */
const EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/**
 * Remove the cell's earlier workdirs, then build the attempt's repositories from the task's base: the trusted copy
 * (`baseGitDir`, bare) and the harness's checkout on branch `main`. Each holds one pack with exactly the base
 * tree's objects and a root commit of that tree made with the grader's fixed identity and dates (for a task shipped
 * as a folder this is the same commit id the grader's fresh checkout has).
 */
export async function prepareWorkdir(opts: {
  ref: TaskRef;
  task: TaskSpec;
  libraryDir: string;
  workRoot: string;
  mirrorRoot: string;
  /** where mirrors of remote repositories come from (EVALFLEET_GIT_REMOTE_BASE), when the task names one */
  gitRemoteBase?: string;
}): Promise<PreparedWorkdir> {
  const dirs = attemptDirs(opts.workRoot, opts.ref);
  await rm(dirs.cellDir, { recursive: true, force: true });
  await Promise.all([dirs.home, dirs.out, dirs.taskDir].map((d) => mkdir(d, { recursive: true })));
  const { task } = opts;
  let source: { gitDir: string; tree: string } | null;
  if (task.repo_path !== undefined) {
    const mirror = await localMirror(path.resolve(opts.libraryDir, task.repo_path), opts.mirrorRoot);
    source = { gitDir: mirror, tree: await baseTree(mirror, "HEAD", task) };
  } else if (task.repo && task.base_commit) {
    const mirror = await repoMirror(task.repo, opts.mirrorRoot, opts.gitRemoteBase);
    source = { gitDir: mirror, tree: await baseTree(mirror, task.base_commit, task) };
  } else if (task.track !== "swe") {
    // An open-ended task may have no repository: the harness starts in an empty one, and its patch is what it wrote.
    source = null;
  } else {
    throw new EvalfleetError(
      ErrorCode.InvalidConfig,
      `task ${task.id} has no repository: it needs repo_path, or repo + base_commit`,
    );
  }
  await mkdir(dirs.repo, { recursive: true });
  const baseCommit = await sealedBase(source, dirs.baseGitDir, ["--bare", dirs.baseGitDir]);
  const harnessCommit = await sealedBase(source, path.join(dirs.repo, ".git"), [dirs.repo]);
  if (harnessCommit !== baseCommit)
    throw new EvalfleetError(ErrorCode.Internal, `base commits differ: ${harnessCommit} vs ${baseCommit}`);
  const inRepo = (args: string[]) => git(dirs.repo, args, SEALED_GIT_ENV);
  // read-tree moves no ref, so no reflog is written (reset would start one).
  await inRepo(["read-tree", "-u", "--reset", "main"]);
  // A harness that commits needs an identity; the patch is taken against the base either way.
  await inRepo(["config", "user.name", "evalfleet harness"]);
  await inRepo(["config", "user.email", "harness@evalfleet.invalid"]);
  return { dirs, baseCommit };
}

/** The tree of the task's base commit in a mirror, or an error that names the task and the commit. */
async function baseTree(mirror: string, rev: string, task: TaskSpec): Promise<string> {
  try {
    return await gitText(
      mirror,
      ["--git-dir=.", "rev-parse", "--verify", `${rev}^{commit}^{tree}`],
      SEALED_GIT_ENV,
    );
  } catch (err) {
    throw new EvalfleetError(
      ErrorCode.NotFound,
      `task ${task.id}: the mirror ${mirror} has no commit ${rev} (${(err as Error).message})`,
    );
  }
}

/**
 * Make a new repository at `gitDir` (by `init`) holding only `source.tree`'s objects — packed straight from the
 * mirror, nothing shared or linked — and a root commit of that tree on `refs/heads/main`, without a reflog.
 */
async function sealedBase(
  source: { gitDir: string; tree: string } | null,
  gitDir: string,
  init: string[],
): Promise<string> {
  await git(path.dirname(gitDir), ["init", "-q", "--template=", ...init], SEALED_GIT_ENV);
  const at = (args: string[], input?: string) =>
    git(path.dirname(gitDir), [`--git-dir=${gitDir}`, ...args], SEALED_GIT_ENV, 300_000, input);
  let tree = EMPTY_TREE;
  if (source) {
    tree = source.tree;
    // rev-list of a tree lists the tree, its subtrees and blobs: no commit, so no history comes along.
    const objects = await git(
      source.gitDir,
      ["--git-dir=.", "rev-list", "--objects", source.tree],
      SEALED_GIT_ENV,
    );
    await mkdir(path.join(gitDir, "objects", "pack"), { recursive: true });
    // Packed by the new repository, reading the mirror's objects as an alternate for this one command (nothing
    // is recorded): git writes a pack's temporary file in the packing repository's object folder and renames it
    // into place, and the mirror is often on another filesystem (an image layer; the attempt's workdir is a
    // volume), where that rename fails with EXDEV.
    await git(
      path.dirname(gitDir),
      [`--git-dir=${gitDir}`, "pack-objects", "-q", path.join(gitDir, "objects", "pack", "pack")],
      { ...SEALED_GIT_ENV, GIT_ALTERNATE_OBJECT_DIRECTORIES: path.resolve(source.gitDir, "objects") },
      300_000,
      objects,
    );
  } else {
    await at(["hash-object", "-w", "-t", "tree", "--stdin"], "");
  }
  const commit = (await at(["commit-tree", tree, "-m", "evalfleet base"])).toString("utf8").trim();
  // init made HEAD point at main (init.defaultBranch); no reflog is started for it.
  await at(["-c", "core.logAllRefUpdates=false", "update-ref", "refs/heads/main", commit]);
  return commit;
}

/**
 * Before a session starts its harness: the harness folders are checked again, since an earlier session's harness
 * had them. HOME is made anew after the first session (the adapter writes config files there, and a link planted
 * in it would make the task write through it), `out` is made anew if it is no longer a real folder, and a
 * checkout that is no longer a real folder ends the attempt.
 */
export async function readyForSession(dirs: AttemptDirs, index: number): Promise<void> {
  const real = async (p: string) => (await lstat(p).catch(() => null))?.isDirectory() === true;
  if (!(await real(dirs.harnessRoot)) || !(await real(dirs.repo)))
    throw new EvalfleetError(
      ErrorCode.Forbidden,
      `the harness replaced its working directory ${dirs.repo}: no further session runs in it`,
    );
  if (index > 0 || !(await real(dirs.home))) {
    await rm(dirs.home, { recursive: true, force: true });
    await mkdir(dirs.home);
  }
  if (!(await real(dirs.out))) {
    await rm(dirs.out, { recursive: true, force: true });
    await mkdir(dirs.out);
  }
}
