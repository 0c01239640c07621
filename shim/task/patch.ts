import { createHash } from "node:crypto";
import { rm } from "node:fs/promises";
import path from "node:path";
import { git } from "./git.js";

export interface CollectedPatch {
  /** `git diff --binary` bytes: empty when nothing changed */
  bytes: Buffer;
  /** sha256 hex of the bytes */
  sha256: string;
}

/**
 * Everything the harness changed or added since the base commit, whether or not it committed, staged or left files
 * untracked: `git add -A` into a throw-away index (the harness's own index is left alone), then a binary diff of that
 * index against the base. Files the repository ignores stay out, as they would of any real patch.
 */
export async function collectPatch(
  repo: string,
  baseCommit: string,
  scratchDir: string,
): Promise<CollectedPatch> {
  const index = path.join(scratchDir, `patch-index-${process.pid}-${Date.now()}`);
  const env = { GIT_INDEX_FILE: index };
  try {
    await git(repo, ["read-tree", baseCommit], env);
    await git(repo, ["add", "-A", "--", "."], env);
    const bytes = await git(
      repo,
      ["diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "--no-renames", baseCommit, "--"],
      env,
    );
    return { bytes, sha256: createHash("sha256").update(bytes).digest("hex") };
  } finally {
    await rm(index, { force: true });
    await rm(`${index}.lock`, { force: true });
  }
}
