/**
 * The grader's rows: the results cache (grade_cache) shared by every replica, and gold-validation verdicts
 * (task_validation) that runs consult.
 */

import type { Db } from "./db.js";

/** One grade_cache row. `reportJson` is kept as a JSON *string* inside the JSONB column (see getGradeCacheJson). */
export interface GradeCacheRow {
  cacheKey: string;
  instanceId: string;
  imageDigest: string;
  /** sha256 of the patch, "none" for no patch, "" when unknown */
  patchHash: string;
  graderVersion: string;
  status: string;
  reportJson: string;
}

/**
 * The cached outcome's JSON text, or undefined. It is stored as a JSON string, not an object: JSONB reorders object
 * keys, and report.json must come back byte-identical to the official one.
 */
export async function getGradeCacheJson(db: Db, cacheKey: string): Promise<string | undefined> {
  const r = await db.query<{ report: unknown }>("SELECT report FROM grade_cache WHERE cache_key = $1", [
    cacheKey,
  ]);
  const stored = r.rows[0]?.report;
  return typeof stored === "string" ? stored : undefined;
}

/** Insert a cache row; the first writer of a key wins (identical inputs grade identically). */
export async function insertGradeCacheRow(db: Db, row: GradeCacheRow): Promise<void> {
  await db.query(
    `INSERT INTO grade_cache (cache_key, instance_id, image_digest, patch_hash, grader_version, status, report)
     VALUES ($1, $2, $3, $4, $5, $6, to_jsonb($7::text))
     ON CONFLICT (cache_key) DO NOTHING`,
    [
      row.cacheKey,
      row.instanceId,
      row.imageDigest,
      row.patchHash,
      row.graderVersion,
      row.status,
      row.reportJson,
    ],
  );
}

export interface TaskValidation {
  taskId: string;
  valid: boolean;
  reason: string | null;
  /** what the verdict was computed against: the image digest, or a checkout-graded task's content digest */
  imageDigest: string | null;
  /** docker: the image graded in, `name@sha256:…` (what grading then uses); null for the checkout grader */
  imageRef?: string | null;
  /** which grader validated it: `docker` (in the image) or `local` (a checkout on the host) */
  backend?: string | null;
  /** taskSpecHash of the task as validated: a task changed since is not validated any more */
  taskHash?: string | null;
  validatedAt: string;
}

export async function saveTaskValidation(db: Db, v: Omit<TaskValidation, "validatedAt">): Promise<void> {
  await db.query(
    `INSERT INTO task_validation (task_id, valid, reason, image_digest, image_ref, backend, task_hash, validated_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, now())
     ON CONFLICT (task_id) DO UPDATE SET valid = EXCLUDED.valid, reason = EXCLUDED.reason,
       image_digest = EXCLUDED.image_digest, image_ref = EXCLUDED.image_ref, backend = EXCLUDED.backend,
       task_hash = EXCLUDED.task_hash, validated_at = EXCLUDED.validated_at`,
    [v.taskId, v.valid, v.reason, v.imageDigest, v.imageRef ?? null, v.backend ?? null, v.taskHash ?? null],
  );
}

interface ValidationRow {
  task_id: string;
  valid: boolean;
  reason: string | null;
  image_digest: string | null;
  image_ref: string | null;
  backend: string | null;
  task_hash: string | null;
  validated_at: Date | string;
}

const VALIDATION_COLUMNS =
  "task_id, valid, reason, image_digest, image_ref, backend, task_hash, validated_at";

function validationOf(row: ValidationRow): TaskValidation {
  return {
    taskId: row.task_id,
    valid: row.valid,
    reason: row.reason,
    imageDigest: row.image_digest,
    imageRef: row.image_ref,
    backend: row.backend,
    taskHash: row.task_hash,
    validatedAt: new Date(row.validated_at).toISOString(),
  };
}

export async function getTaskValidation(db: Db, taskId: string): Promise<TaskValidation | null> {
  const r = await db.query<ValidationRow>(
    `SELECT ${VALIDATION_COLUMNS} FROM task_validation WHERE task_id = $1`,
    [taskId],
  );
  return r.rows[0] ? validationOf(r.rows[0]) : null;
}

/** The validation records of these tasks, by task id (a task never validated has none). */
export async function getTaskValidations(
  db: Db,
  taskIds: readonly string[],
): Promise<Map<string, TaskValidation>> {
  if (taskIds.length === 0) return new Map();
  const r = await db.query<ValidationRow>(
    `SELECT ${VALIDATION_COLUMNS} FROM task_validation WHERE task_id = ANY($1::text[])`,
    [[...taskIds]],
  );
  return new Map(r.rows.map((row) => [row.task_id, validationOf(row)]));
}

/** Tasks gold validation marked invalid: the planner leaves them out of runs. */
export async function invalidTaskIds(db: Db): Promise<Set<string>> {
  const r = await db.query<{ task_id: string }>("SELECT task_id FROM task_validation WHERE NOT valid");
  return new Set(r.rows.map((row) => row.task_id));
}
