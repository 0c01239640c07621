import type { Db } from "../db.js";
import type { Migration } from "./types.js";

/*
 * Instance images by digest (built by `evalfleet images build`, mirrored by `images mirror`), and what gold
 * validation graded each task in: the image reference (name@digest) and the task's content hash, so a task changed
 * since it was validated is noticed before a run, not after.
 */
const STATEMENTS = [
  `CREATE TABLE IF NOT EXISTS images (
    name TEXT NOT NULL,
    digest TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('built', 'mirrored')),
    task_id TEXT,
    instance_id TEXT NOT NULL,
    source TEXT NOT NULL,
    base_commit TEXT,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (name, digest)
  )`,
  "CREATE INDEX IF NOT EXISTS images_instance ON images (instance_id, recorded_at)",
  "CREATE INDEX IF NOT EXISTS images_task ON images (task_id, recorded_at)",
  "ALTER TABLE task_validation ADD COLUMN IF NOT EXISTS image_ref TEXT",
  "ALTER TABLE task_validation ADD COLUMN IF NOT EXISTS backend TEXT",
  "ALTER TABLE task_validation ADD COLUMN IF NOT EXISTS task_hash TEXT",
];

async function up(tx: Db): Promise<void> {
  for (const sql of STATEMENTS) await tx.query(sql);
}

export const migration005: Migration = { version: 5, name: "images", up };
