import type { ActorSettings, DatabaseSettings } from "../../config/index.js";
import type { Logger } from "../../lib/log.js";
import { openPlane, type Plane } from "../../plane/connect.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { type Db, openDb } from "../../store/db.js";
import { openEmbeddedClient } from "../../store/embedded.js";
import { migrate } from "../../store/migrations.js";
import { ACTORS, type ActorContext, actorNames } from "../index.js";
import type { Actor } from "./actor.js";

/** A database opened from settings, and how to give it back (an embedded folder's lock included). */
export interface OpenedDb {
  db: Db;
  label: string;
  close(): Promise<void>;
}

/**
 * Open the database the settings name and migrate it: PostgreSQL, or an embedded PGlite folder — through the
 * local plane that serves it, else owned (locked) for this process's life (store/embedded.ts). Settings with no
 * database never get here: config/ refuses a role that needs one and has none.
 */
export async function openDatabase(
  database: DatabaseSettings,
  opts: { command: string; log: Logger },
): Promise<OpenedDb> {
  if (database.kind === "none")
    throw new EvalfleetError(
      ErrorCode.InvalidConfig,
      "no database configured: set DATABASE_URL (or PGHOST, PGUSER, PGPASSWORD, PGDATABASE)",
    );
  if (database.kind === "pglite") {
    const e = await openEmbeddedClient(database.dataDir, { command: opts.command, log: opts.log });
    try {
      await migrate(e.db, { log: opts.log });
    } catch (err) {
      await e.close().catch(() => {});
      throw err;
    }
    return { db: e.db, label: e.label, close: () => e.close() };
  }
  const db = await openDb({ url: database.url, log: opts.log });
  try {
    await migrate(db, { log: opts.log });
  } catch (err) {
    await db.close().catch(() => {});
    throw err;
  }
  return { db, label: database.label, close: () => db.close() };
}

/** A set of running actors sharing one plane and one database. */
export interface RunningActors {
  actors: Actor[];
  ctx: ActorContext;
  /** Drain every actor (deadline each), then close the plane. */
  shutdown(deadlineMs?: number): Promise<void>;
  /** Resolves when any actor fails (its work loop died): the process should end non-zero. Never rejects. */
  failed: Promise<{ actor: string; cause: string }>;
}

/** Start the named actors in this process. */
export async function startActors(
  names: string[],
  opts: {
    log: Logger;
    settings: ActorSettings;
    plane?: Plane;
    db?: Db;
    /** How each named actor starts (default: the registry, actors/index.ts). */
    registry?: Record<string, (ctx: ActorContext) => Promise<Actor>>;
  },
): Promise<RunningActors> {
  const registry = opts.registry ?? ACTORS;
  const unknown = names.filter((n) => !Object.hasOwn(registry, n));
  if (unknown.length > 0)
    throw new EvalfleetError(
      ErrorCode.InvalidConfig,
      `unknown actor ${unknown.join(", ")}; known actors: ${actorNames().join(", ")}`,
    );
  const plane =
    opts.plane ??
    (await openPlane({
      name: `evalfleet-${names.join("+")}`,
      nats: opts.settings.nats,
      streamReplicas: opts.settings.topology.streamReplicas,
      streamMaxBytes: opts.settings.topology.streamMaxBytes,
    }));
  const actors: Actor[] = [];
  let opened: OpenedDb | undefined;
  let db: Db | undefined;
  try {
    if (opts.db) db = opts.db;
    else {
      opened = await openDatabase(opts.settings.database, { command: "actor", log: opts.log });
      db = opened.db;
    }
    const ctx: ActorContext = { plane, db, log: opts.log, settings: opts.settings };
    for (const name of names) {
      const start = registry[name]!;
      actors.push(await start({ ...ctx, log: opts.log.child({ actor: name }) }));
    }
  } catch (err) {
    // Close what was opened: a NATS connection left open keeps the process alive, doing nothing, where a
    // supervisor must see it exit (PostgreSQL still restarting is the usual cause) and start it again.
    await Promise.allSettled(actors.map((a) => a.stop()));
    await opened?.close().catch(() => {});
    if (!opts.plane) await plane.close().catch(() => {});
    throw err;
  }
  const ctx: ActorContext = { plane, db, log: opts.log, settings: opts.settings };
  const failed = new Promise<{ actor: string; cause: string }>((resolve) => {
    for (const a of actors)
      void a.stopped.then((cause) => {
        if (a.state === "failed") resolve({ actor: a.name, cause });
      });
  });
  return {
    actors,
    ctx,
    failed,
    async shutdown(deadlineMs = 10_000) {
      await Promise.all(actors.map((a) => a.drain(deadlineMs)));
      if (!opts.plane) await plane.close();
      await opened?.close();
    },
  };
}

/**
 * Run until a signal asks for a drain (resolves) or an actor fails (drains the rest, then throws, so the CLI exits
 * non-zero and a supervisor — ECS, systemd, `evalfleet up`'s caller — starts the process again).
 */
export async function runUntilStopped(running: RunningActors, log: Logger, drainMs: number): Promise<void> {
  const why = await Promise.race([
    untilSignal(log).then((signal) => ({ signal }) as const),
    running.failed.then((f) => ({ failed: f }) as const),
  ]);
  await running.shutdown(drainMs);
  if ("failed" in why)
    throw new EvalfleetError(
      ErrorCode.Unavailable,
      `actor ${why.failed.actor} stopped working (${why.failed.cause}); the others were drained. Start the process again.`,
    );
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
