import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Actor } from "../../actors/runtime/actor.js";
import { openPlane, type Plane } from "../../plane/connect.js";
import { type FreshDb, freshDb } from "./db.js";
import { startNats, type TestNats } from "./nats.js";

/** A task of a rig's library: a stand-in with only an id and a track (open-ended ones get a rubric). */
export interface RigTask {
  id: string;
  track?: string;
}

/**
 * A NATS server, a fresh database, a task library folder, and the planes and actors a test opens on them: one
 * close() stops the actors (last first), closes the planes and removes the rest.
 */
export interface PlaneRig {
  nats: TestNats;
  store: FreshDb;
  libDir: string;
  /** A plane of its own, closed with the rig. */
  plane(name: string): Promise<Plane>;
  /** Stops an actor with the rig, before the rig's planes close. */
  adopt(actor: Actor): Actor;
  close(): Promise<void>;
}

export async function startPlaneRig(
  name: string,
  opts: { tasks?: RigTask[]; nats?: Parameters<typeof startNats>[0] } = {},
): Promise<PlaneRig> {
  const nats = await startNats(opts.nats);
  const store = await freshDb(name);
  const libDir = await mkdtemp(join(tmpdir(), `ef-${name}-lib-`));
  for (const t of opts.tasks ?? []) {
    const track = t.track ?? "swe";
    const extra = track === "open_ended" ? "rubric: be good\n" : "";
    await writeFile(join(libDir, `${t.id}.yaml`), `id: ${t.id}\ntrack: ${track}\n${extra}`);
  }
  const planes: Plane[] = [];
  const actors: Actor[] = [];
  return {
    nats,
    store,
    libDir,
    async plane(planeName) {
      const p = await openPlane({ nats: nats.settings, name: planeName });
      planes.push(p);
      return p;
    },
    adopt(actor) {
      actors.push(actor);
      return actor;
    },
    async close() {
      for (const a of actors.reverse()) await a.stop();
      for (const p of planes) await p.close();
      await store.cleanup();
      await nats.cleanup();
      await rm(libDir, { recursive: true, force: true });
    },
  };
}
