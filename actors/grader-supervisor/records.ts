/** The grade cache every replica shares, kept in the grade_cache table. */

import { GRADER_VERSION } from "../../grading/index.js";
import type { Db } from "../../store/db.js";
import { getGradeCacheJson, insertGradeCacheRow } from "../../store/grades.js";
import { type CachedOutcome, type GradeCache, sha256Hex } from "./backends/cache.js";

interface KeyMeta {
  instanceId: string;
  imageDigest: string;
  patch: string | null;
}

/** grade_cache rows, keyed by gradeCacheKey; the outcome comes back byte-identical (see store/grades.ts). */
export class DbGradeCache implements GradeCache {
  // GradeCache.set only sees the key; the caller notes what the key stands for so the row is readable.
  private readonly pending = new Map<string, KeyMeta>();

  constructor(private readonly db: Db) {}

  note(key: string, meta: KeyMeta): void {
    this.pending.set(key, meta);
  }

  forget(key: string): void {
    this.pending.delete(key);
  }

  async get(key: string): Promise<CachedOutcome | undefined> {
    const stored = await getGradeCacheJson(this.db, key);
    return stored === undefined ? undefined : (JSON.parse(stored) as CachedOutcome);
  }

  async set(key: string, outcome: CachedOutcome): Promise<void> {
    const m = this.pending.get(key);
    const { cached: _cached, ...plain } = outcome;
    await insertGradeCacheRow(this.db, {
      cacheKey: key,
      instanceId: m?.instanceId ?? "",
      imageDigest: m?.imageDigest ?? "",
      patchHash: m === undefined ? "" : m.patch === null ? "none" : sha256Hex(m.patch),
      graderVersion: GRADER_VERSION,
      status: outcome.kind === "graded" ? outcome.status : `not_graded:${outcome.reason}`,
      reportJson: JSON.stringify(plain),
    });
  }
}
