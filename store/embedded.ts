import { mkdir } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { type Logger, silentLogger } from "../lib/log.js";
import {
  liveOwner,
  lockHolder,
  type OwnerLockBase,
  readOwnerLock,
  rewriteOwnerLock,
  takeOwnerLock,
} from "../lib/owner-lock.js";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import { type Db, openDb } from "./db.js";
import { migrate } from "./migrations.js";
import { servePglite } from "./pglite-serve.js";

/**
 * The embedded database's folder is owned by one process at a time. The owner writes `<dataDir>.lock` (created
 * atomically, with its pid, its command and — when it serves the database, as `up` and `start` do — the
 * postgres:// URL it serves on). Every other process reads the lock: a served database is connected to over the
 * wire; one held by a process that does not serve it (a `report` run while the plane is stopped) is refused at
 * once with what to do, never opened a second time. A lock whose process is gone is stale and taken over.
 */
export interface EmbeddedLock {
  pid: number;
  command: string;
  /** where the owner serves the database; null when it does not (or not yet) */
  url: string | null;
  /** the owner will serve it (the URL follows once it is open and migrated) */
  serves: boolean;
  dataDir: string;
  startedAt: string;
}

export interface EmbeddedDb {
  db: Db;
  /** "embedded PGlite (dir)" plus how this process reaches it */
  label: string;
  /** the URL the database is served on (the owner's, when it serves or connects) */
  url: string | null;
  close(): Promise<void>;
}

export function lockPath(dataDir: string): string {
  return join(dirname(dataDir), `${basename(dataDir)}.lock`);
}

export async function readLock(dataDir: string): Promise<EmbeddedLock | null> {
  const v = await readOwnerLock(lockPath(dataDir));
  return v && toEmbedded(v, dataDir);
}

function toEmbedded(v: OwnerLockBase & Record<string, unknown>, dataDir: string): EmbeddedLock {
  return { ...lockHolder(v), serves: v.serves === true, dataDir };
}

/** The lock's holder, if it is alive (a served lock whose port no longer answers is as stale as a dead pid). */
export async function liveLock(dataDir: string): Promise<EmbeddedLock | null> {
  const v = await liveOwner(lockPath(dataDir));
  return v && toEmbedded(v, dataDir);
}

function inUse(cur: EmbeddedLock, wanted: string): EvalfleetError {
  const who = `\`evalfleet ${cur.command}\` (pid ${cur.pid})`;
  const remedy = cur.serves
    ? `It is served${cur.url ? ` at ${cur.url}` : ""}: commands such as dashboard, report, watch and status connect to it on their own. ` +
      `To run ${wanted} as well, stop that process first, or give this one its own --state-dir (or DATABASE_URL).`
    : `Wait for it to finish or stop it, then run this again; or start the plane with \`evalfleet up\`, which ` +
      "shares the database with every other command.";
  return new EvalfleetError(
    ErrorCode.Conflict,
    `the embedded database at ${cur.dataDir} is in use by ${who}; PGlite cannot be opened by two processes. ${remedy}`,
  );
}

/** Take the lock or fail with who holds it. Returns the release function. */
function takeLock(dataDir: string, info: EmbeddedLock): Promise<() => Promise<void>> {
  return takeOwnerLock(lockPath(dataDir), info, (holder) =>
    inUse(toEmbedded(holder, dataDir), `\`evalfleet ${info.command}\``),
  );
}

/**
 * Open the embedded database as its owner: lock the folder, open PGlite, migrate, and (with `serve`) serve it on
 * 127.0.0.1 so every other process can connect. Fails fast when another live process holds it.
 */
export async function openEmbeddedOwner(
  dataDir: string,
  opts: { command: string; serve: boolean; log?: Logger },
): Promise<EmbeddedDb> {
  const log = opts.log ?? silentLogger();
  const info: EmbeddedLock = {
    pid: process.pid,
    command: opts.command,
    url: null,
    serves: opts.serve,
    dataDir,
    startedAt: new Date().toISOString(),
  };
  const release = await takeLock(dataDir, info);
  let db: Db | undefined;
  try {
    await mkdir(dataDir, { recursive: true });
    db = await openDb({ dataDir, log });
    await migrate(db, { log });
    if (!opts.serve) {
      const opened = db;
      return {
        db: opened,
        label: `embedded PGlite (${dataDir})`,
        url: null,
        async close() {
          await opened.close();
          await release();
        },
      };
    }
    const server = await servePglite(db, { log });
    await rewriteOwnerLock(lockPath(dataDir), { ...info, url: server.url });
    const opened = db;
    return {
      db: opened,
      label: `embedded PGlite (${dataDir}), served at ${server.url}`,
      url: server.url,
      async close() {
        await server.close();
        await opened.close();
        await release();
      },
    };
  } catch (err) {
    await db?.close().catch(() => undefined);
    await release();
    throw err;
  }
}

/**
 * Open the embedded database for a command that is not the plane: connect to the plane's server when it serves
 * the folder; otherwise own it for the command's length (so a plane started meanwhile fails fast rather than
 * opening it twice).
 */
export async function openEmbeddedClient(
  dataDir: string,
  opts: { command: string; log?: Logger; waitForServerMs?: number },
): Promise<EmbeddedDb> {
  let holder = await liveLock(dataDir);
  // The plane is still opening (initdb and migrations take seconds): wait for the URL it is about to serve on.
  const deadline = Date.now() + (opts.waitForServerMs ?? 60_000);
  while (holder?.serves && !holder.url && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 200));
    holder = await liveLock(dataDir);
  }
  if (holder?.url) {
    const db = await openDb({ url: holder.url, poolSize: 4, ...(opts.log ? { log: opts.log } : {}) });
    return {
      db,
      label: `embedded PGlite (${dataDir}) through \`evalfleet ${holder.command}\` at ${holder.url}`,
      url: holder.url,
      close: () => db.close(),
    };
  }
  if (holder) throw inUse(holder, `\`evalfleet ${opts.command}\``);
  return openEmbeddedOwner(dataDir, {
    command: opts.command,
    serve: false,
    ...(opts.log ? { log: opts.log } : {}),
  });
}
