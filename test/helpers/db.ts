import { randomBytes } from "node:crypto";
import pg from "pg";
import { type Db, openDb, quoteIdent } from "../../store/db.js";
import { migrate } from "../../store/migrations.js";

/*
 * A fresh, isolated results database for one test file.
 *
 * With DATABASE_URL set we create a whole DATABASE per call rather than a schema: it isolates everything a schema
 * does not — advisory locks (the migrator's lock is per database), catalog lookups that resolve through
 * search_path, and the URL we hand to spawned processes needs no `options=-c search_path` plumbing. It is a
 * template copy, so it costs tens of milliseconds. Without DATABASE_URL: embedded PGlite in memory.
 */

export interface FreshDb {
  db: Db;
  /** postgres URL of the fresh database (absent on PGlite) — pass it as DATABASE_URL to child processes. */
  url?: string;
  cleanup(): Promise<void>;
}

export async function freshDb(name = "test", opts: { migrate?: boolean } = {}): Promise<FreshDb> {
  const adminUrl = process.env.DATABASE_URL;
  const wantMigrate = opts.migrate ?? true;
  if (!adminUrl) {
    const db = await openDb();
    if (wantMigrate) await migrate(db);
    return { db, cleanup: () => db.close() };
  }

  const slug = name
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "_")
    .slice(0, 30);
  const dbName = `ef_${slug}_${process.pid}_${randomBytes(4).toString("hex")}`;
  await admin(adminUrl, `CREATE DATABASE ${quoteIdent(dbName)}`);
  const u = new URL(adminUrl);
  u.pathname = `/${dbName}`;
  const url = u.toString();
  const db = await openDb({ url });
  try {
    if (wantMigrate) await migrate(db);
  } catch (err) {
    await db.close();
    await admin(adminUrl, `DROP DATABASE IF EXISTS ${quoteIdent(dbName)} WITH (FORCE)`);
    throw err;
  }
  let cleaned = false;
  return {
    db,
    url,
    async cleanup() {
      if (cleaned) return;
      cleaned = true;
      await db.close();
      // FORCE ends sessions a test left open (a child process, a second pool) instead of failing the drop.
      await admin(adminUrl, `DROP DATABASE IF EXISTS ${quoteIdent(dbName)} WITH (FORCE)`);
    },
  };
}

async function admin(url: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}
