/**
 * The grader's rows: the results cache (grade_cache) shared by every replica, and gold-validation verdicts
 * (task_validation) that runs consult.
 */
import type { Db } from "../../store/db.js";
import { type CachedOutcome, type GradeCache, sha256Hex } from "./backends/cache.js";
import { GRADER_VERSION } from "./grading/index.js";

interface KeyMeta {
  instanceId: string;
  imageDigest: string;
  patch: string | null;
}

/**
 * grade_cache rows, keyed by gradeCacheKey. The outcome is kept as a JSON *string* inside the JSONB column:
 * JSONB reorders object keys, and report.json must come back byte-identical to the official one.
 */
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
    const r = await this.db.query<{ report: unknown }>(
      "SELECT report FROM grade_cache WHERE cache_key = $1",
      [key],
    );
    const stored = r.rows[0]?.report;
    if (typeof stored !== "string") return undefined;
    return JSON.parse(stored) as CachedOutcome;
  }

  async set(key: string, outcome: CachedOutcome): Promise<void> {
    const m = this.pending.get(key);
    const status = outcome.kind === "graded" ? outcome.status : `not_graded:${outcome.reason}`;
    const { cached: _cached, ...plain } = outcome;
    await this.db.query(
      `INSERT INTO grade_cache (cache_key, instance_id, image_digest, patch_hash, grader_version, status, report)
       VALUES ($1, $2, $3, $4, $5, $6, to_jsonb($7::text))
       ON CONFLICT (cache_key) DO NOTHING`,
      [
        key,
        m?.instanceId ?? "",
        m?.imageDigest ?? "",
        m === undefined ? "" : m.patch === null ? "none" : sha256Hex(m.patch),
        GRADER_VERSION,
        status,
        JSON.stringify(plain),
      ],
    );
  }
}

export interface TaskValidation {
  taskId: string;
  valid: boolean;
  reason: string | null;
  imageDigest: string | null;
  validatedAt: string;
}

export async function saveTaskValidation(db: Db, v: Omit<TaskValidation, "validatedAt">): Promise<void> {
  await db.query(
    `INSERT INTO task_validation (task_id, valid, reason, image_digest, validated_at)
     VALUES ($1, $2, $3, $4, now())
     ON CONFLICT (task_id) DO UPDATE SET valid = EXCLUDED.valid, reason = EXCLUDED.reason,
       image_digest = EXCLUDED.image_digest, validated_at = EXCLUDED.validated_at`,
    [v.taskId, v.valid, v.reason, v.imageDigest],
  );
}

export async function getTaskValidation(db: Db, taskId: string): Promise<TaskValidation | null> {
  const r = await db.query<{
    task_id: string;
    valid: boolean;
    reason: string | null;
    image_digest: string | null;
    validated_at: Date | string;
  }>("SELECT task_id, valid, reason, image_digest, validated_at FROM task_validation WHERE task_id = $1", [
    taskId,
  ]);
  const row = r.rows[0];
  if (!row) return null;
  return {
    taskId: row.task_id,
    valid: row.valid,
    reason: row.reason,
    imageDigest: row.image_digest,
    validatedAt: new Date(row.validated_at).toISOString(),
  };
}

/** Tasks gold validation marked invalid: the planner leaves them out of runs. */
export async function invalidTaskIds(db: Db): Promise<Set<string>> {
  const r = await db.query<{ task_id: string }>("SELECT task_id FROM task_validation WHERE NOT valid");
  return new Set(r.rows.map((row) => row.task_id));
}
