/**
 * Identical patches for the same task image are graded once. The key is
 * sha256(image digest + patch hash + grader version): the digest pins the task and its environment,
 * the grader version invalidates everything when grading semantics change.
 */
import { createHash } from "node:crypto";
import { GRADER_VERSION } from "../../../grading/index.js";
import type { GradeOutcome } from "./types.js";

export function sha256Hex(s: string): string {
  return createHash("sha256").update(s, "utf8").digest("hex");
}

export function gradeCacheKey(
  imageDigest: string,
  patch: string | null,
  graderVersion = GRADER_VERSION,
): string {
  // null and "" are different predictions (patch_is_None), so they hash differently.
  const patchHash = patch === null ? "none" : sha256Hex(patch);
  return sha256Hex(`${imageDigest}\n${patchHash}\n${graderVersion}`);
}

/** Only deterministic verdicts are cached; infrastructure failures never are. */
export type CachedOutcome = Exclude<GradeOutcome, { kind: "infra_failure" }>;

export interface GradeCache {
  get(key: string): Promise<CachedOutcome | undefined>;
  set(key: string, outcome: CachedOutcome): Promise<void>;
}

export class MemoryGradeCache implements GradeCache {
  private readonly entries = new Map<string, CachedOutcome>();
  async get(key: string): Promise<CachedOutcome | undefined> {
    return this.entries.get(key);
  }
  async set(key: string, outcome: CachedOutcome): Promise<void> {
    this.entries.set(key, outcome);
  }
}
