import { createHash } from "node:crypto";
import { lstat, mkdtemp, rm } from "node:fs/promises";
import path from "node:path";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import { git, SEALED_GIT_ENV } from "./git.js";

export interface CollectedPatch {
  /** `git diff --binary` bytes: empty when nothing changed */
  bytes: Buffer;
  /** sha256 hex of the bytes */
  sha256: string;
}

/**
 * Settings that make git run nothing and read nothing but the files: they win over any config file, although the
 * git dir used is the task's own (which the harness never saw) and no system or user config is read at all.
 */
const NOTHING_RUNS = [
  "core.fsmonitor=false",
  "core.hooksPath=/dev/null",
  "core.untrackedCache=false",
  "core.attributesFile=/dev/null",
  "core.excludesFile=/dev/null",
  "core.sparseCheckout=false",
  "core.symlinks=true",
  "core.fileMode=true",
  "core.ignoreCase=false",
  "core.safecrlf=false",
  "index.sparse=false",
  "submodule.recurse=false",
  "gc.auto=0",
  "maintenance.auto=false",
].flatMap((kv) => ["-c", kv]);

/**
 * Everything the harness changed or added since the base commit, whether or not it committed, staged or left files
 * untracked, collected without trusting anything the harness could have written: the git dir is the task's own copy
 * of the base (`gitDir`, never shown to the harness), so the harness's `.git` — its config (`core.fsmonitor`,
 * filter and diff drivers, `include.path`), hooks, index, objects, or a `.git` file pointing elsewhere — is never
 * read; no system or user config is read; and the settings above override anything that could run a program. The
 * working tree is read as files: `git add -A` into a throw-away index, then a binary diff of it against the base.
 * Symlinks are recorded as links (never followed), nested repositories as what git makes of them, files the
 * repository ignores stay out, as they would of any real patch. The harness's `.gitattributes` is content and is
 * honoured as git would (it can change line endings of what it wrote, never run anything: drivers live in config).
 */
/**
 * Untracked folders that are repositories of their own (a `.git` inside): git would record a gitlink to a commit
 * nobody has, or refuse the whole `add` when the nested repository has no commit. They are left out, and git
 * never opens them.
 */
async function nestedRepositories(
  worktree: string,
  run: (args: string[]) => Promise<Buffer>,
): Promise<string[]> {
  const listed = (await run(["ls-files", "-z", "--others", "--directory", "--exclude-standard"]))
    .toString("utf8")
    .split("\0")
    .filter((p) => p.endsWith("/"));
  const out: string[] = [];
  for (const dir of listed)
    if (await lstat(path.join(worktree, dir, ".git")).catch(() => null)) out.push(dir.slice(0, -1));
  return out;
}

export async function collectPatch(opts: {
  /** the harness's checkout */
  worktree: string;
  /** the trusted git dir holding the base commit */
  gitDir: string;
  baseCommit: string;
  /** a folder of the task's own (not the harness's) for the index and git's HOME */
  scratchDir: string;
}): Promise<CollectedPatch> {
  const st = await lstat(opts.worktree).catch(() => null);
  if (!st?.isDirectory())
    throw new EvalfleetError(
      ErrorCode.Forbidden,
      `the harness replaced its working directory ${opts.worktree} (${st?.isSymbolicLink() ? "a symlink" : "not a directory"}): no patch is collected from it`,
    );
  const scratch = await mkdtemp(path.join(opts.scratchDir, "patch-"));
  const env = {
    ...SEALED_GIT_ENV,
    GIT_DIR: opts.gitDir,
    GIT_WORK_TREE: opts.worktree,
    GIT_INDEX_FILE: path.join(scratch, "index"),
    HOME: scratch,
    XDG_CONFIG_HOME: scratch,
  };
  const run = (args: string[]) => git(opts.worktree, [...NOTHING_RUNS, ...args], env);
  try {
    await run(["read-tree", opts.baseCommit]);
    const nested = await nestedRepositories(opts.worktree, run);
    await run(["add", "-A", "--", ".", ...nested.map((d) => `:(exclude,literal)${d}`)]);
    const bytes = await run([
      "diff",
      "--cached",
      "--binary",
      "--no-color",
      "--no-ext-diff",
      "--no-textconv",
      "--no-renames",
      "--ignore-submodules=none",
      opts.baseCommit,
      "--",
    ]);
    return { bytes, sha256: createHash("sha256").update(bytes).digest("hex") };
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}
