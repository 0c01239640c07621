/**
 * The attempt's working directory at the task's base commit. Repositories come from a local git mirror cache,
 * made once per repository and shared by every attempt on the machine; each attempt clones from it (objects shared,
 * so it costs seconds, not a network clone) and starts clean: a re-run removes whatever an earlier attempt left.
 */
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { cp, mkdir, mkdtemp, readdir, readFile, rename, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import type { TaskSpec } from "../../protocol/config.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { attemptToken, safeSlug } from "../../protocol/names.js";
import { git, gitText } from "./git.js";
import type { TaskRef } from "./ref.js";

export interface AttemptDirs {
  /** root/<run>/<cell>: removed whole when an attempt of the cell starts */
  cellDir: string;
  /** cellDir/<attempt> */
  attemptDir: string;
  /** the checkout the harness works in */
  repo: string;
  /** HOME and config for the harness, outside the checkout */
  home: string;
  /** trajectory files and the patch index, outside the checkout */
  out: string;
}

export function defaultWorkRoot(env: NodeJS.ProcessEnv = process.env): string {
  return env.EVALFLEET_WORKDIR || path.join(tmpdir(), "evalfleet-work");
}

export function defaultMirrorRoot(env: NodeJS.ProcessEnv = process.env): string {
  return env.EVALFLEET_GIT_MIRRORS || path.join(tmpdir(), "evalfleet-mirrors");
}

/** Where an attempt's folders are: deterministic, from safeSlug(run)/safeSlug(cell)/attempt. */
export function attemptDirs(root: string, ref: TaskRef): AttemptDirs {
  const cellDir = path.join(root, safeSlug(ref.run), safeSlug(ref.cell));
  const attemptDir = path.join(cellDir, attemptToken(ref.attempt));
  return {
    cellDir,
    attemptDir,
    repo: path.join(attemptDir, "repo"),
    home: path.join(attemptDir, "home"),
    out: path.join(attemptDir, "out"),
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
 * only when EVALFLEET_GIT_REMOTE_BASE names a remote (e.g. https://github.com), mirrored from it once.
 */
export async function repoMirror(repo: string, mirrorRoot: string, env: NodeJS.ProcessEnv): Promise<string> {
  const final = repoMirrorPath(mirrorRoot, repo);
  if (existsSync(final)) return final;
  const remoteBase = env.EVALFLEET_GIT_REMOTE_BASE;
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
  baseCommit: string;
}

/**
 * Remove the cell's earlier workdirs, then check the task's base commit out from its mirror into a fresh folder on
 * branch `main`. Every other ref is dropped and the remote forgotten, so the harness cannot find later history
 * (the fix) with `git log --all`.
 */
export async function prepareWorkdir(opts: {
  ref: TaskRef;
  task: TaskSpec;
  libraryDir: string;
  workRoot: string;
  mirrorRoot: string;
  env?: NodeJS.ProcessEnv;
}): Promise<PreparedWorkdir> {
  const dirs = attemptDirs(opts.workRoot, opts.ref);
  await rm(dirs.cellDir, { recursive: true, force: true });
  await Promise.all([dirs.home, dirs.out].map((d) => mkdir(d, { recursive: true })));
  const { task } = opts;
  let mirror: string;
  let base: string;
  if (task.repo_path !== undefined) {
    mirror = await localMirror(path.resolve(opts.libraryDir, task.repo_path), opts.mirrorRoot);
    base = "HEAD";
  } else if (task.repo && task.base_commit) {
    mirror = await repoMirror(task.repo, opts.mirrorRoot, opts.env ?? process.env);
    base = task.base_commit;
  } else if (task.track !== "swe") {
    // An open-ended task may have no repository: the harness starts in an empty one, and its patch is what it wrote.
    await mkdir(dirs.repo, { recursive: true });
    await git(dirs.repo, ["init", "-q"]);
    await git(dirs.repo, ["commit", "-q", "--allow-empty", "--no-verify", "-m", "evalfleet base"]);
    await git(dirs.repo, ["config", "user.name", "evalfleet harness"]);
    await git(dirs.repo, ["config", "user.email", "harness@evalfleet.invalid"]);
    return { dirs, baseCommit: await gitText(dirs.repo, ["rev-parse", "HEAD"]) };
  } else {
    throw new EvalfleetError(
      ErrorCode.InvalidConfig,
      `task ${task.id} has no repository: it needs repo_path, or repo + base_commit`,
    );
  }
  await git(dirs.attemptDir, ["clone", "-q", "--shared", "--no-checkout", mirror, dirs.repo]);
  const baseCommit = await gitText(dirs.repo, ["rev-parse", "--verify", `${base}^{commit}`]);
  await git(dirs.repo, ["checkout", "-q", "-B", "main", baseCommit]);
  await git(dirs.repo, ["remote", "remove", "origin"]);
  // A harness that commits needs an identity; the patch is taken against the base either way.
  await git(dirs.repo, ["config", "user.name", "evalfleet harness"]);
  await git(dirs.repo, ["config", "user.email", "harness@evalfleet.invalid"]);
  const refs = (await gitText(dirs.repo, ["for-each-ref", "--format=%(refname)"])).split("\n");
  for (const r of refs) if (r && r !== "refs/heads/main") await git(dirs.repo, ["update-ref", "-d", r]);
  return { dirs, baseCommit };
}
