/**
 * The repository a grade (or an image build) starts from, at its base commit with no history past it:
 *
 * - a task shipped as a plain folder is copied and committed once, with a fixed identity and dates, so the same
 *   folder always gives the same base commit id (the local grader and the built image agree on it);
 * - a git repository is fetched at `base_commit` alone (depth 1): no later commit, no other ref, no reflog, no
 *   remote, no alternates — the fix a later commit holds is not there to be found.
 */
import { cp, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { run } from "../lib/run.js";
import { pathExists } from "./base.js";

// Fixed identity and dates: the same folder always yields the same base commit id.
export const GIT_ENV = {
  GIT_AUTHOR_NAME: "evalfleet",
  GIT_AUTHOR_EMAIL: "grader@evalfleet.invalid",
  GIT_COMMITTER_NAME: "evalfleet",
  GIT_COMMITTER_EMAIL: "grader@evalfleet.invalid",
  GIT_AUTHOR_DATE: "2000-01-01T00:00:00Z",
  GIT_COMMITTER_DATE: "2000-01-01T00:00:00Z",
  GIT_TERMINAL_PROMPT: "0",
  GIT_CONFIG_NOSYSTEM: "1",
};

/**
 * Where git is looked for, and its HOME, when a caller hands no environment of its own: fixed, not this process's
 * environment, so a testbed never depends on who built it.
 */
export const GIT_HOST_ENV: NodeJS.ProcessEnv = {
  PATH: "/usr/local/bin:/usr/bin:/bin:/opt/homebrew/bin",
  HOME: tmpdir(),
};

export async function git(
  cwd: string,
  args: string[],
  env: NodeJS.ProcessEnv = GIT_HOST_ENV,
): Promise<string> {
  const r = await run("git", ["-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", ...args], {
    cwd,
    env: { ...env, ...GIT_ENV },
    timeoutMs: 600_000,
  });
  if (r.code !== 0) throw new Error(`git ${args[0]} failed: ${r.combined.trim() || r.spawnError?.message}`);
  return r.stdout.trim();
}

export interface Testbed {
  /** Remove this folder when done. */
  root: string;
  /** The repository. */
  dir: string;
  baseCommit: string;
}

/** Copy `source` (a plain folder) to a temp folder and commit it as the base. */
export async function freshCheckout(source: string, env: NodeJS.ProcessEnv = GIT_HOST_ENV): Promise<Testbed> {
  const root = await mkdtemp(path.join(tmpdir(), "evalfleet-checkout-"));
  const dir = path.join(root, "repo");
  try {
    await cp(source, dir, { recursive: true, filter: (src) => path.basename(src) !== ".git" });
    await git(dir, ["init", "-q"], env);
    await git(dir, ["add", "-A"], env);
    await git(dir, ["commit", "-q", "--allow-empty", "--no-verify", "-m", "evalfleet base"], env);
    return { root, dir, baseCommit: await git(dir, ["rev-parse", "HEAD"], env) };
  } catch (err) {
    await rm(root, { recursive: true, force: true });
    throw err;
  }
}

/** A fresh repository holding `baseCommit` of the git repository at `source` and nothing after it. */
export async function prunedClone(
  source: string,
  baseCommit: string,
  env: NodeJS.ProcessEnv = GIT_HOST_ENV,
): Promise<Testbed> {
  const root = await mkdtemp(path.join(tmpdir(), "evalfleet-testbed-"));
  const dir = path.join(root, "repo");
  try {
    await git(root, ["init", "-q", dir], env);
    // upload-pack must allow asking for a commit by id; depth 1 brings that commit's tree and nothing older or newer.
    await git(
      dir,
      [
        "fetch",
        "-q",
        "--no-tags",
        "--depth=1",
        "--upload-pack=git -c uploadpack.allowAnySHA1InWant=true upload-pack",
        `file://${path.resolve(source)}`,
        baseCommit,
      ],
      env,
    );
    await git(dir, ["checkout", "-q", "-B", "main", "FETCH_HEAD"], env);
    await git(dir, ["reflog", "expire", "--expire=now", "--all"], env);
    await rm(path.join(dir, ".git", "FETCH_HEAD"), { force: true });
    await git(dir, ["gc", "-q", "--prune=now"], env);
    const head = await git(dir, ["rev-parse", "HEAD"], env);
    if (!head.startsWith(baseCommit.toLowerCase()) && head !== baseCommit) {
      throw new Error(`the fetched commit is ${head}, not ${baseCommit}`);
    }
    return { root, dir, baseCommit: head };
  } catch (err) {
    await rm(root, { recursive: true, force: true });
    throw err;
  }
}

/** The testbed for a task's source: a pruned clone when it is a git repository and a base commit is named. */
export async function prepareTestbed(
  source: string,
  baseCommit: string | undefined,
  env: NodeJS.ProcessEnv = GIT_HOST_ENV,
): Promise<Testbed> {
  if (baseCommit && (await pathExists(path.join(source, ".git"))))
    return prunedClone(source, baseCommit, env);
  return freshCheckout(source, env);
}
