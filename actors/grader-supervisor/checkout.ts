/**
 * The local backend needs a disposable git checkout at a base commit. A task shipped with evalfleet is a plain
 * folder, so every grade gets a fresh copy committed as the base: the backend leaves its checkout patched, and a
 * retry must never find the previous attempt's patch already applied (it would be scored as an apply failure).
 */
import { createHash } from "node:crypto";
import { cp, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { listFiles } from "../../shim/task/workdir.js";
import { run } from "./backends/exec.js";
import type { GradeBackend, GradeJob } from "./backends/types.js";
import { infraFailure } from "./backends/types.js";

// Fixed identity and dates: the same folder always yields the same base commit id.
const GIT_ENV = {
  GIT_AUTHOR_NAME: "evalfleet",
  GIT_AUTHOR_EMAIL: "grader@evalfleet.invalid",
  GIT_COMMITTER_NAME: "evalfleet",
  GIT_COMMITTER_EMAIL: "grader@evalfleet.invalid",
  GIT_AUTHOR_DATE: "2000-01-01T00:00:00Z",
  GIT_COMMITTER_DATE: "2000-01-01T00:00:00Z",
};

async function git(cwd: string, args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  const r = await run("git", ["-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", ...args], {
    cwd,
    env: { ...env, ...GIT_ENV },
    timeoutMs: 120_000,
  });
  if (r.code !== 0) throw new Error(`git ${args[0]} failed: ${r.combined.trim() || r.spawnError?.message}`);
  return r.stdout.trim();
}

/** Copy `source` to a temp folder and commit it; returns the checkout and its base commit. */
export async function freshCheckout(
  source: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ root: string; dir: string; baseCommit: string }> {
  const root = await mkdtemp(path.join(tmpdir(), "evalfleet-checkout-"));
  const dir = path.join(root, "repo");
  try {
    await cp(source, dir, { recursive: true });
    await git(dir, ["init", "-q"], env);
    await git(dir, ["add", "-A"], env);
    await git(dir, ["commit", "-q", "--allow-empty", "--no-verify", "-m", "evalfleet base"], env);
    return { root, dir, baseCommit: await git(dir, ["rev-parse", "HEAD"], env) };
  } catch (err) {
    await rm(root, { recursive: true, force: true });
    throw err;
  }
}

/**
 * Wrap the local backend: `job.checkoutDir` names the task's source folder (never modified); each grade runs in
 * its own fresh checkout, removed afterwards.
 */
export function withFreshCheckout(inner: GradeBackend, env: NodeJS.ProcessEnv = process.env): GradeBackend {
  return {
    name: inner.name,
    async grade(job: GradeJob, signal: AbortSignal) {
      const source = job.checkoutDir;
      if (!source) return inner.grade(job, signal);
      let co: Awaited<ReturnType<typeof freshCheckout>>;
      try {
        co = await freshCheckout(source, env);
      } catch (err) {
        return infraFailure("runtime", `cannot prepare a checkout of ${source}: ${(err as Error).message}`);
      }
      try {
        const instance = { ...job.instance, base_commit: co.baseCommit };
        return await inner.grade({ ...job, instance, checkoutDir: co.dir }, signal);
      } finally {
        await rm(co.root, { recursive: true, force: true });
      }
    },
  };
}

/**
 * The "image digest" of a local task: sha256 over its files and everything else that decides a verdict. It plays
 * the role the image digest plays for docker tasks — the results-cache key and what gold validation records — so a
 * change to the task's code or tests invalidates both.
 */
export async function localTaskDigest(source: string, extra: unknown): Promise<string> {
  const h = createHash("sha256");
  for (const f of await listFiles(source)) {
    h.update(`${f}\0`);
    h.update(await readFile(path.join(source, f)));
    h.update("\0");
  }
  h.update(JSON.stringify(extra));
  return `sha256:${h.digest("hex")}`;
}
