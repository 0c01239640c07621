import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import type { Logger } from "../../protocol/log.js";
import { type Db, openDb } from "../../store/db.js";
import { migrate } from "../../store/migrations.js";
import { ACTORS, type ActorContext, actorNames } from "../index.js";
import type { Actor } from "./actor.js";
import { openPlane, type Plane } from "./connect.js";

/** Open the results database from DATABASE_URL, or embedded PGlite (in `dataDir`, or memory), and migrate it. */
export async function openResultsDb(opts: { url?: string; dataDir?: string; log: Logger }): Promise<Db> {
  const url = opts.url ?? process.env.DATABASE_URL;
  const db = await openDb({
    ...(url ? { url } : {}),
    ...(opts.dataDir ? { dataDir: opts.dataDir } : {}),
    log: opts.log,
  });
  try {
    await migrate(db, { log: opts.log });
  } catch (err) {
    await db.close().catch(() => {});
    throw err;
  }
  return db;
}

/** A set of running actors sharing one plane and one database. */
export interface RunningActors {
  actors: Actor[];
  ctx: ActorContext;
  /** Drain every actor (deadline each), then close the plane. */
  shutdown(deadlineMs?: number): Promise<void>;
}

/** Start the named actors in this process. */
export async function startActors(
  names: string[],
  opts: { log: Logger; plane?: Plane; db?: Db; servers?: string | string[] },
): Promise<RunningActors> {
  const unknown = names.filter((n) => !Object.hasOwn(ACTORS, n));
  if (unknown.length > 0)
    throw new EvalfleetError(
      ErrorCode.InvalidConfig,
      `unknown actor ${unknown.join(", ")}; known actors: ${actorNames().join(", ")}`,
    );
  const plane =
    opts.plane ??
    (await openPlane({
      name: `evalfleet-${names.join("+")}`,
      ...(opts.servers ? { servers: opts.servers } : {}),
    }));
  const actors: Actor[] = [];
  let db: Db | undefined;
  try {
    db = opts.db ?? (await openResultsDb({ log: opts.log }));
    const ctx: ActorContext = { plane, db, log: opts.log };
    for (const name of names) {
      const start = ACTORS[name]!;
      actors.push(await start({ ...ctx, log: opts.log.child({ actor: name }) }));
    }
  } catch (err) {
    // Close what was opened: a NATS connection left open keeps the process alive, doing nothing, where a
    // supervisor must see it exit (PostgreSQL still restarting is the usual cause) and start it again.
    await Promise.allSettled(actors.map((a) => a.stop()));
    if (!opts.db) await db?.close().catch(() => {});
    if (!opts.plane) await plane.close().catch(() => {});
    throw err;
  }
  const ctx: ActorContext = { plane, db, log: opts.log };
  return {
    actors,
    ctx,
    async shutdown(deadlineMs = 10_000) {
      await Promise.all(actors.map((a) => a.drain(deadlineMs)));
      if (!opts.plane) await plane.close();
      if (!opts.db) await db.close();
    },
  };
}

/**
 * Resolve when SIGTERM or SIGINT arrives (once). The one place signals are handled; a second signal exits at once.
 */
export function untilSignal(log: Logger): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    let seen = false;
    const on = (sig: NodeJS.Signals) => {
      if (seen) {
        log.warn({ signal: sig }, "second signal: exiting now");
        process.exit(130);
      }
      seen = true;
      log.info({ signal: sig }, "draining");
      resolve(sig);
    };
    process.on("SIGTERM", on);
    process.on("SIGINT", on);
  });
}
