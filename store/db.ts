import type { PGlite } from "@electric-sql/pglite";
import pg from "pg";
import { type Logger, silentLogger } from "../lib/log.js";
import { ErrorCode, RetryableError } from "../protocol/errors.js";

/**
 * The one database interface every part uses. `pg` and PGlite share `query(text, params)` with $n placeholders,
 * so the same SQL runs on PostgreSQL/Aurora and on the embedded default.
 */
export interface Db {
  query<T = Record<string, unknown>>(
    sql: string,
    params?: unknown[],
  ): Promise<{ rows: T[]; rowCount: number }>;
  /** Runs fn in one transaction (a savepoint when already inside one); rolls back if fn throws. */
  transaction<T>(fn: (tx: Db) => Promise<T>): Promise<T>;
  close(): Promise<void>;
  readonly kind: "postgres" | "pglite";
}

export interface OpenDbOptions {
  /** postgres:// URL (usually DATABASE_URL). Absent: embedded PGlite. */
  url?: string;
  /** PGlite data directory (persisted); absent with no url: in-memory. */
  dataDir?: string;
  /** Schema to work in (created if missing, put first on search_path). */
  schema?: string;
  log?: Logger;
  /** pg pool size (default 10). */
  poolSize?: number;
  /** PGlite only: start from a dumpPgliteDataDir() image instead of running initdb (test templates). */
  loadDataDir?: Blob;
}

// Type OIDs. BIGINT comes back as a number (callers keep values below 2^53: counts, tokens, nano-USD), NUMERIC
// as an exact decimal string — the same on both drivers so no caller branches on `kind`.
const INT8 = 20;
const INT8_ARRAY = 1016;
const NUMERIC = 1700;
const parseInt8 = (v: string): number => Number(v);
const keepString = (v: string): string => v;

export async function openDb(opts: OpenDbOptions = {}): Promise<Db> {
  const log = opts.log ?? silentLogger();
  const db = opts.url ? openPostgres(opts.url, opts, log) : await openPglite(opts);
  if (opts.schema) {
    try {
      await db.query(`CREATE SCHEMA IF NOT EXISTS ${quoteIdent(opts.schema)}`);
    } catch (err) {
      // Two processes creating the schema at once: the loser sees a duplicate; the schema exists either way.
      if (sqlState(err) !== "23505" && sqlState(err) !== "42P06") throw err;
    }
    // PGlite is one session, so setting search_path once holds; pg sets it per connection via `options`.
    if (db.kind === "pglite") await db.query(`SET search_path TO ${quoteIdent(opts.schema)}`);
  }
  return db;
}

export function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

export function sqlState(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

// ---- PostgreSQL (pg Pool) ----------------------------------------------------------------------------------

function pgTypes(): pg.CustomTypesConfig {
  // Per-pool overrides rather than pg.types.setTypeParser: the global would change every other pg user in-process.
  const types = new pg.TypeOverrides();
  const baseInt8Array = pg.types.getTypeParser(
    INT8_ARRAY as Parameters<typeof pg.types.getTypeParser>[0],
    "text",
  ) as (v: string) => (string | null)[];
  types.setTypeParser(INT8, parseInt8);
  types.setTypeParser(INT8_ARRAY, (v: string) =>
    baseInt8Array(v).map((x) => (x === null ? null : Number(x))),
  );
  types.setTypeParser(NUMERIC, keepString);
  return types;
}

function openPostgres(url: string, opts: OpenDbOptions, log: Logger): Db {
  const pool = new pg.Pool({
    connectionString: url,
    max: opts.poolSize ?? 10,
    types: pgTypes(),
    connectionTimeoutMillis: 15_000,
    ...(opts.schema ? { options: `-c search_path=${quoteIdent(opts.schema)},public` } : {}),
  });
  // An idle client losing its connection emits 'error' on the pool; unhandled, that would kill the process.
  pool.on("error", (err) => log.warn({ err }, "postgres idle client error"));

  const run = async <T>(c: pg.Pool | pg.PoolClient, sql: string, params?: unknown[]) => {
    try {
      const r = await c.query(sql, params as unknown[] | undefined);
      return { rows: r.rows as T[], rowCount: r.rowCount ?? r.rows.length };
    } catch (err) {
      throw asRetryable(err);
    }
  };

  const db: Db = {
    kind: "postgres",
    query: (sql, params) => run(pool, sql, params),
    async transaction(fn) {
      let client: pg.PoolClient;
      try {
        client = await pool.connect();
      } catch (err) {
        throw asRetryable(err);
      }
      let broken: Error | undefined;
      // A checked-out client has none of the pool's listeners: a connection that dies meanwhile (PostgreSQL
      // restarting) emits 'error' on it, which unheard would crash the process. The statement in flight fails by
      // itself; the client is only marked broken, so it is destroyed, not handed to the next caller.
      const onError = (err: Error) => {
        broken ??= err;
      };
      client.on("error", onError);
      try {
        await run(client, "BEGIN");
        const result = await fn(txDb("postgres", (s, p) => run(client, s, p)));
        await run(client, "COMMIT");
        return result;
      } catch (err) {
        try {
          await client.query("ROLLBACK");
        } catch (rollbackErr) {
          // The connection is unusable; hand it back destroyed rather than to the next caller.
          broken = rollbackErr as Error;
        }
        throw err;
      } finally {
        client.off("error", onError);
        client.release(broken);
      }
    },
    async close() {
      await pool.end();
    },
  };
  return db;
}

// SQLSTATE classes that mean "the server or the connection, not the statement": 08 connection exception,
// 57P01-03 shutdown / cannot connect now, 53300 too many connections; 40001/40P01 are transaction conflicts that
// succeed when re-run.
const RETRYABLE_SQLSTATE = new Set(["57P01", "57P02", "57P03", "53300", "40001", "40P01"]);
const RETRYABLE_NODE = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EPIPE",
  "ENOTFOUND",
  "EAI_AGAIN",
]);

export function isTransientDbError(err: unknown): boolean {
  const code = sqlState(err);
  if (code !== undefined) {
    return code.startsWith("08") || RETRYABLE_SQLSTATE.has(code) || RETRYABLE_NODE.has(code);
  }
  // pg raises these without any code; the message is the only signal it gives (the last one: a statement on a
  // checked-out client whose connection already died).
  const msg = err instanceof Error ? err.message : "";
  return /^Connection terminated|timeout exceeded when trying to connect|^Client has encountered a connection error/.test(
    msg,
  );
}

function asRetryable(err: unknown): unknown {
  if (!isTransientDbError(err)) return err;
  const code = sqlState(err);
  const ec = code === "40001" || code === "40P01" ? ErrorCode.Conflict : ErrorCode.Unavailable;
  return new RetryableError(ec, `database unavailable: ${(err as Error).message}`, { cause: err });
}

// ---- PGlite (embedded) -------------------------------------------------------------------------------------

async function openPglite(opts: OpenDbOptions): Promise<Db> {
  const { PGlite } = await import("@electric-sql/pglite");
  const parsers = { [INT8]: parseInt8, [NUMERIC]: keepString };
  const lite: PGlite = opts.dataDir
    ? await PGlite.create(opts.dataDir, { parsers })
    : await PGlite.create({ parsers, ...(opts.loadDataDir ? { loadDataDir: opts.loadDataDir } : {}) });

  // PGlite is one session: a query issued while another caller's transaction is open would run inside it. Every
  // top-level operation therefore holds the session gate for its whole length (a socket client served by
  // servePglite holds the same gate for each of its protocol exchanges); statements inside a transaction go
  // straight to the transaction handle.
  const gate = new SessionGate();
  const exclusive = async <T>(fn: () => Promise<T>): Promise<T> => {
    const owner = gate.inProcessOwner();
    await gate.acquire(owner);
    try {
      return await fn();
    } finally {
      gate.release(owner);
    }
  };
  const run = async <T>(
    target: Pick<PGlite, "query">,
    sql: string,
    params?: unknown[],
  ): Promise<{ rows: T[]; rowCount: number }> => {
    const r = await target.query<T>(sql, params as unknown[] | undefined);
    return { rows: r.rows, rowCount: r.rowCount ?? r.affectedRows ?? r.rows.length };
  };

  const db: Db = {
    kind: "pglite",
    query: (sql, params) => exclusive(() => run(lite, sql, params)),
    transaction: (fn) =>
      exclusive(() => lite.transaction((tx) => fn(txDb("pglite", (s, p) => run(tx, s, p))))),
    close: () => exclusive(() => lite.close()),
  };
  pgliteHandles.set(db, { lite, exclusive, gate });
  return db;
}

interface PgliteHandle {
  lite: PGlite;
  exclusive: <T>(fn: () => Promise<T>) => Promise<T>;
  gate: SessionGate;
}

const pgliteHandles = new WeakMap<Db, PgliteHandle>();

/** The PGlite instance and session gate behind a PGlite Db (for servePglite); undefined for PostgreSQL. */
export function pgliteHandle(db: Db): PgliteHandle | undefined {
  return pgliteHandles.get(db);
}

/**
 * Who holds PGlite's one session. An owner is an in-process operation (a fresh negative id each) or a socket
 * client (its handler id, positive); the session passes to waiters first come, first served, and only when its
 * owner releases it — a socket client keeps it from its first message until the backend is ready for a new
 * query outside a transaction, so another client's statements can never land inside its exchange.
 */
export class SessionGate {
  private owner: number | null = null;
  private waiters: Array<{ owner: number; grant: () => void; refuse: (err: Error) => void }> = [];
  private nextInProcess = 0;

  inProcessOwner(): number {
    this.nextInProcess -= 1;
    return this.nextInProcess;
  }

  get holder(): number | null {
    return this.owner;
  }

  /** Resolves once `owner` holds the session (at once if it already does). */
  acquire(owner: number): Promise<void> {
    if (this.owner === owner) return Promise.resolve();
    if (this.owner === null && this.waiters.length === 0) {
      this.owner = owner;
      return Promise.resolve();
    }
    return new Promise((grant, refuse) => this.waiters.push({ owner, grant, refuse }));
  }

  release(owner: number): void {
    if (this.owner !== owner) return;
    const next = this.waiters.shift();
    this.owner = next ? next.owner : null;
    next?.grant();
  }

  /** Refuse every wait of `owner` (its client went away). */
  abandon(owner: number, err: Error): void {
    const mine = this.waiters.filter((w) => w.owner === owner);
    this.waiters = this.waiters.filter((w) => w.owner !== owner);
    for (const w of mine) w.refuse(err);
  }
}

/**
 * An uncompressed image of a PGlite database (between operations), for openDb({ loadDataDir }). Starting from an
 * image skips initdb and migrations: about 0.7 s instead of several seconds.
 */
export async function dumpPgliteDataDir(db: Db): Promise<Blob> {
  const h = pgliteHandles.get(db);
  if (!h) throw new Error("dumpPgliteDataDir: not a PGlite Db");
  return h.exclusive(() => h.lite.dumpDataDir("none"));
}

// ---- transaction handle shared by both ---------------------------------------------------------------------

type RunFn = (sql: string, params?: unknown[]) => Promise<{ rows: unknown[]; rowCount: number }>;

let savepointSeq = 0;

/** A Db bound to one open transaction. Nested transaction() calls become savepoints. */
function txDb(kind: Db["kind"], exec: RunFn): Db {
  const tx: Db = {
    kind,
    query: exec as Db["query"],
    async transaction(fn) {
      const sp = `ef_sp_${++savepointSeq}`;
      await exec(`SAVEPOINT ${sp}`);
      try {
        const result = await fn(tx);
        await exec(`RELEASE SAVEPOINT ${sp}`);
        return result;
      } catch (err) {
        await exec(`ROLLBACK TO SAVEPOINT ${sp}`);
        throw err;
      }
    },
    close: () => Promise.reject(new Error("close() is not available on a transaction handle")),
  };
  return tx;
}
