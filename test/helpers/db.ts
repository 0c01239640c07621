import { createHash, randomBytes } from "node:crypto";
import { readdir, readFile, rename, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { type Db, dumpPgliteDataDir, openDb, quoteIdent } from "../../store/db.js";
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

export async function freshDb(
  name = "test",
  opts: { migrate?: boolean; adminUrl?: string } = {},
): Promise<FreshDb> {
  const adminUrl = opts.adminUrl ?? process.env.DATABASE_URL;
  const wantMigrate = opts.migrate ?? true;
  if (!adminUrl) {
    const db = wantMigrate ? await openDb({ loadDataDir: await migratedPgliteImage() }) : await openDb();
    // Still run the migrator: a no-op on the image, and it proves the image is current.
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

/*
 * PGlite's initdb plus the migrations cost seconds per database. The migrated database is built once, dumped, and
 * cached on disk keyed by the PGlite version and the migration sources, so every later freshDb() in any test
 * process loads it in well under a second. A change to any migration file changes the key.
 */
let image: Promise<Blob> | undefined;

function migratedPgliteImage(): Promise<Blob> {
  image ??= (async () => {
    const path = join(tmpdir(), `evalfleet-pglite-migrated-${await templateKey()}.tar`);
    try {
      return new Blob([await readFile(path)]);
    } catch {
      const db = await openDb();
      try {
        await migrate(db);
        const blob = await dumpPgliteDataDir(db);
        const tmp = `${path}.${process.pid}.${randomBytes(4).toString("hex")}`;
        await writeFile(tmp, new Uint8Array(await blob.arrayBuffer()));
        await rename(tmp, path); // atomic: a concurrent reader sees the whole image or none
        return blob;
      } finally {
        await db.close();
      }
    }
  })();
  return image;
}

async function templateKey(): Promise<string> {
  const h = createHash("sha256");
  // The package's exports hide package.json; find it next to the resolved entry point (dist/..).
  const entry = createRequire(import.meta.url).resolve("@electric-sql/pglite");
  h.update(await readFile(join(entry, "..", "..", "package.json")));
  const store = fileURLToPath(new URL("../../store/", import.meta.url));
  const files = [
    "migrations.ts",
    "db.ts",
    ...(await readdir(join(store, "migrations"))).map((f) => `migrations/${f}`),
  ];
  for (const f of files.sort()) h.update(f).update(await readFile(join(store, f)));
  return h.digest("hex").slice(0, 16);
}

/** The machine's PostgreSQL when DATABASE_URL is not set (Debian's, trust auth, as CI and the dev machines have). */
const LOCAL_POSTGRES = "postgres://postgres@127.0.0.1:5432/postgres";

/**
 * A fresh PostgreSQL database, for tests whose point needs a real server (several processes on one database):
 * DATABASE_URL, else the local server; a clear failure when neither answers — never a silent skip.
 */
export async function freshPostgres(name = "test"): Promise<FreshDb & { url: string }> {
  const adminUrl = process.env.DATABASE_URL ?? LOCAL_POSTGRES;
  try {
    await admin(adminUrl, "SELECT 1");
  } catch (err) {
    throw new Error(
      `this test needs PostgreSQL: set DATABASE_URL (tried ${adminUrl}: ${err instanceof Error ? err.message : String(err)})`,
    );
  }
  const f = await freshDb(name, { adminUrl });
  if (!f.url) throw new Error("freshDb returned no URL for PostgreSQL");
  return f as FreshDb & { url: string };
}
