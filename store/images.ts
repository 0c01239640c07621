/** The images table: every instance image evalfleet built or mirrored, by digest. */
import type { Db } from "./db.js";

export type ImageKind = "built" | "mirrored";

export interface ImageRecord {
  /** Repository in the registry (`host:port/evalfleet/task-x`, `…/swebench/sweb.eval.x86_64.…`). */
  name: string;
  digest: string;
  kind: ImageKind;
  taskId: string | null;
  instanceId: string;
  /** built: the source key (repository, install, base); mirrored: the source reference it was copied from. */
  source: string;
  baseCommit: string | null;
  recordedAt?: string;
}

export async function recordImage(db: Db, r: Omit<ImageRecord, "recordedAt">): Promise<void> {
  await db.query(
    `INSERT INTO images (name, digest, kind, task_id, instance_id, source, base_commit, recorded_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, now())
     ON CONFLICT (name, digest) DO UPDATE SET kind = EXCLUDED.kind, task_id = EXCLUDED.task_id,
       instance_id = EXCLUDED.instance_id, source = EXCLUDED.source, base_commit = EXCLUDED.base_commit,
       recorded_at = EXCLUDED.recorded_at`,
    [r.name, r.digest, r.kind, r.taskId, r.instanceId, r.source, r.baseCommit],
  );
}

interface Row {
  name: string;
  digest: string;
  kind: ImageKind;
  task_id: string | null;
  instance_id: string;
  source: string;
  base_commit: string | null;
  recorded_at: Date | string;
}

function fromRow(row: Row): ImageRecord {
  return {
    name: row.name,
    digest: row.digest,
    kind: row.kind,
    taskId: row.task_id,
    instanceId: row.instance_id,
    source: row.source,
    baseCommit: row.base_commit,
    recordedAt: new Date(row.recorded_at).toISOString(),
  };
}

const COLUMNS = "name, digest, kind, task_id, instance_id, source, base_commit, recorded_at";

/** Every image, newest first (optionally of some tasks or instances only). */
export async function listImages(db: Db, opts: { taskIds?: readonly string[] } = {}): Promise<ImageRecord[]> {
  const r = opts.taskIds
    ? await db.query<Row>(
        `SELECT ${COLUMNS} FROM images WHERE task_id = ANY($1::text[]) ORDER BY recorded_at DESC, name`,
        [[...opts.taskIds]],
      )
    : await db.query<Row>(`SELECT ${COLUMNS} FROM images ORDER BY recorded_at DESC, name`);
  return r.rows.map(fromRow);
}

/** The image recorded for name@digest, if any. */
export async function getImage(db: Db, name: string, digest: string): Promise<ImageRecord | null> {
  const r = await db.query<Row>(`SELECT ${COLUMNS} FROM images WHERE name = $1 AND digest = $2`, [
    name,
    digest,
  ]);
  return r.rows[0] ? fromRow(r.rows[0]) : null;
}

/** The latest image built for a task from exactly this source (the repository, its install steps, the base). */
export async function builtImageFor(db: Db, taskId: string, source: string): Promise<ImageRecord | null> {
  const r = await db.query<Row>(
    `SELECT ${COLUMNS} FROM images WHERE kind = 'built' AND task_id = $1 AND source = $2
     ORDER BY recorded_at DESC LIMIT 1`,
    [taskId, source],
  );
  return r.rows[0] ? fromRow(r.rows[0]) : null;
}

/** The latest mirror of an instance's official image. */
export async function mirroredImageFor(db: Db, instanceId: string): Promise<ImageRecord | null> {
  const r = await db.query<Row>(
    `SELECT ${COLUMNS} FROM images WHERE kind = 'mirrored' AND instance_id = $1
     ORDER BY recorded_at DESC LIMIT 1`,
    [instanceId],
  );
  return r.rows[0] ? fromRow(r.rows[0]) : null;
}

/** The latest image recorded for a task (built) or its instance (mirrored). */
export async function latestImageFor(
  db: Db,
  taskId: string,
  instanceId: string,
): Promise<ImageRecord | null> {
  const r = await db.query<Row>(
    `SELECT ${COLUMNS} FROM images WHERE task_id = $1 OR instance_id = $2
     ORDER BY recorded_at DESC LIMIT 1`,
    [taskId, instanceId],
  );
  return r.rows[0] ? fromRow(r.rows[0]) : null;
}
