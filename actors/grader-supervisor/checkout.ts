/**
 * The local backend needs a disposable git checkout at a base commit. A task shipped with evalfleet is a plain
 * folder, so every grade gets a fresh copy committed as the base: the backend leaves its checkout patched, and a
 * retry must never find the previous attempt's patch already applied (it would be scored as an apply failure).
 */
import { createHash } from "node:crypto";
import { readFile, rm } from "node:fs/promises";
import path from "node:path";
import { freshCheckout } from "../../images/testbed.js";
import { listFiles } from "../../task/workdir.js";
import type { GradeBackend, GradeJob } from "./backends/types.js";
import { infraFailure } from "./backends/types.js";

/**
 * Wrap the local backend: `job.checkoutDir` names the task's source folder (never modified); each grade runs in
 * its own fresh checkout, removed afterwards.
 */
export function withFreshCheckout(inner: GradeBackend, env: NodeJS.ProcessEnv): GradeBackend {
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
