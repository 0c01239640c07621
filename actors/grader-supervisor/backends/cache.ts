/**
 * Identical patches for the same task image are graded once. The key is
 * sha256(image digest + patch hash + grader version): the digest pins the task and its environment,
 * the grader version invalidates everything when grading semantics change.
 */
import { createHash } from "node:crypto";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import path from "node:path";
import { GRADER_VERSION } from "../grading/index.js";
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

/** One JSON file per key; written to a temp name then renamed so readers never see half a file. */
export class FileGradeCache implements GradeCache {
  constructor(private readonly dir: string) {}
  private file(key: string): string {
    return path.join(this.dir, `${key}.json`);
  }
  async get(key: string): Promise<CachedOutcome | undefined> {
    try {
      return JSON.parse(await readFile(this.file(key), "utf8")) as CachedOutcome;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw err;
    }
  }
  async set(key: string, outcome: CachedOutcome): Promise<void> {
    await mkdir(this.dir, { recursive: true });
    const tmp = `${this.file(key)}.${process.pid}.${Date.now()}.tmp`;
    await writeFile(tmp, JSON.stringify(outcome));
    await rename(tmp, this.file(key));
  }
}
