import { createServer, type Server, type Socket } from "node:net";
import { PGLiteSocketHandler } from "@electric-sql/pglite-socket";
import { type Logger, silentLogger } from "../lib/log.js";
import { type Db, pgliteHandle } from "./db.js";

/**
 * Serve an open PGlite Db over the PostgreSQL wire protocol on 127.0.0.1, so other processes (the dashboard,
 * report, watch…) read and write the one database the plane holds instead of opening its data folder a second
 * time (PGlite has no lock between processes: two of them on one folder lose rows).
 *
 * `@electric-sql/pglite-socket` parses the connections (startup, SSL refusal, message framing); the scheduling
 * of its messages onto PGlite's single session is ours. Its own queue hands the session to whichever client's
 * message comes next, which lets another client's Parse land between a client's Parse and its Bind when the two
 * arrive in different reads (a large batched insert), and it stops serving for good after one failed message. Here
 * a client holds the session (the same gate this process's own queries take) from its first message until the
 * backend reports ReadyForQuery outside a transaction; a client that disconnects while holding it has its exchange
 * closed (Sync, then ROLLBACK), and one that sits in an open transaction longer than `idleInTransactionMs` is
 * disconnected so the plane's own writers are never blocked by a forgotten `BEGIN`.
 */
export interface PgliteServer {
  /** postgres://…@127.0.0.1:PORT/postgres */
  url: string;
  port: number;
  close(): Promise<void>;
}

const SYNC = new Uint8Array([0x53, 0, 0, 0, 4]);
const TERMINATE = 0x58;
const READY_FOR_QUERY = 0x5a;
const IDLE = 0x49;

/** Follows one client's backend output across chunks, to see each ReadyForQuery and its transaction status. */
class ReadyTracker {
  private carry = new Uint8Array(0);
  /** 'I' idle, 'T' in a transaction, 'E' in a failed transaction; null before the first ReadyForQuery */
  status: number | null = null;
  /** true between a message sent to the backend and the ReadyForQuery that closes its exchange */
  open = false;

  feed(chunk: Uint8Array): void {
    let buf = chunk;
    if (this.carry.length > 0) {
      buf = new Uint8Array(this.carry.length + chunk.length);
      buf.set(this.carry, 0);
      buf.set(chunk, this.carry.length);
    }
    let at = 0;
    while (buf.length - at >= 5) {
      const len = ((buf[at + 1]! << 24) | (buf[at + 2]! << 16) | (buf[at + 3]! << 8) | buf[at + 4]!) >>> 0;
      if (buf.length - at < 1 + len) break;
      if (buf[at] === READY_FOR_QUERY && len === 5) {
        this.status = buf[at + 5]!;
        this.open = false;
      }
      at += 1 + len;
    }
    this.carry = buf.slice(at);
  }

  get idle(): boolean {
    return !this.open && this.status === IDLE;
  }
}

export async function servePglite(
  db: Db,
  opts: {
    host?: string;
    port?: number;
    log?: Logger;
    idleInTransactionMs?: number;
    maxConnections?: number;
  } = {},
): Promise<PgliteServer> {
  const h = pgliteHandle(db);
  if (!h) throw new Error("servePglite: not a PGlite Db");
  const { lite, gate } = h;
  const log = opts.log ?? silentLogger();
  const idleInTransactionMs = opts.idleInTransactionMs ?? 30_000;
  const trackers = new Map<number, ReadyTracker>();
  const handlers = new Map<number, PGLiteSocketHandler>();
  const idleTimers = new Map<number, NodeJS.Timeout>();
  const tracker = (id: number) => {
    let t = trackers.get(id);
    if (!t) {
      t = new ReadyTracker();
      trackers.set(id, t);
    }
    return t;
  };
  const clearIdle = (id: number) => {
    const t = idleTimers.get(id);
    if (t) clearTimeout(t);
    idleTimers.delete(id);
  };

  // The queue the socket handler calls for each complete message it reads (its QueryQueueManager's interface).
  const queue = {
    async enqueue(id: number, message: Uint8Array, onData: (data: Uint8Array) => void): Promise<number> {
      const t = tracker(id);
      if (message[0] === TERMINATE) {
        // The client says goodbye; the one backend session is everyone's, so it is not told.
        if (gate.holder === id && t.idle) gate.release(id);
        return 0;
      }
      await gate.acquire(id);
      clearIdle(id);
      t.open = true;
      let bytes = 0;
      await lite.runExclusive(() =>
        lite.execProtocolRawStream(message, {
          onRawData: (data) => {
            bytes += data.length;
            t.feed(data);
            onData(data);
          },
        }),
      );
      if (t.idle) gate.release(id);
      else {
        // Mid-exchange or between statements of an open transaction: the session stays this client's, for a while.
        idleTimers.set(
          id,
          setTimeout(() => {
            log.warn({ client: id }, "embedded database: a client idle in a transaction was disconnected");
            void handlers.get(id)?.detach(true);
          }, idleInTransactionMs).unref(),
        );
      }
      return bytes;
    },
    clearQueueForHandler(id: number): void {
      gate.abandon(id, new Error("client disconnected"));
    },
    async clearTransactionIfNeeded(id: number): Promise<void> {
      clearIdle(id);
      const t = trackers.get(id);
      trackers.delete(id);
      handlers.delete(id);
      if (gate.holder !== id) return;
      try {
        await lite.runExclusive(async () => {
          // Close an exchange cut midway (the backend may be skipping to a Sync), then any transaction left open.
          if (t?.open) await lite.execProtocolRaw(SYNC);
          if (lite.isInTransaction()) await lite.execProtocolRaw(simpleQuery("ROLLBACK"));
        });
      } catch (err) {
        log.warn({ err }, "embedded database: closing a disconnected client's exchange failed");
      } finally {
        gate.release(id);
      }
    },
  };

  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    if (handlers.size >= (opts.maxConnections ?? 100)) {
      socket.end();
      return;
    }
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
    // The handler types its queue as the library's own (private) class; ours has the same three methods.
    const handler = new PGLiteSocketHandler({
      queryQueue: queue as unknown as ConstructorParameters<typeof PGLiteSocketHandler>[0]["queryQueue"],
      closeOnDetach: true,
    });
    handlers.set(handler.handlerId, handler);
    handler.attach(socket).catch((err: unknown) => {
      log.warn({ err }, "embedded database: a client could not be attached");
      socket.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port ?? 0, opts.host ?? "127.0.0.1", () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : 0;
  const host = opts.host ?? "127.0.0.1";
  return {
    url: `postgres://postgres@${host}:${port}/postgres`,
    port,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      await Promise.allSettled([...handlers.values()].map((hd) => hd.detach(true)));
      for (const s of sockets) s.destroy();
      for (const id of [...idleTimers.keys()]) clearIdle(id);
      await closed;
    },
  };
}

/** A simple-protocol Query message. */
function simpleQuery(sql: string): Uint8Array {
  const body = new TextEncoder().encode(`${sql}\0`);
  const msg = new Uint8Array(5 + body.length);
  msg[0] = 0x51;
  new DataView(msg.buffer).setInt32(1, 4 + body.length);
  msg.set(body, 5);
  return msg;
}
