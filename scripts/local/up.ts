import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { connect } from "@nats-io/transport-node";
import { actorNames } from "../../actors/index.js";
import { openResultsDb, type RunningActors, startActors } from "../../actors/runtime/main.js";
import type { Logger } from "../../protocol/log.js";
import type { Db } from "../../store/db.js";
import { freePort, NatsServerNode, writeNodeConfig } from "./nats-server.js";

/** The whole plane on one machine, and how to stop it. */
export interface LocalPlane {
  natsUrl: string;
  /** true when `up` started its own nats-server (and will remove its store) */
  ownNats: boolean;
  db: Db;
  dbLabel: string;
  running: RunningActors;
  stop(): Promise<void>;
}

/** Does a NATS server answer at `url`? */
async function natsAnswers(url: string): Promise<boolean> {
  try {
    const nc = await connect({ servers: url, timeout: 1_500, maxReconnectAttempts: 0 });
    await nc.close();
    return true;
  } catch {
    return false;
  }
}

/**
 * Start the plane in this process: NATS_URL when it answers, else a nats-server of our own (JetStream, a temp
 * store); DATABASE_URL, else embedded PGlite under `stateDir`; then every actor.
 */
export async function startLocalPlane(opts: {
  log: Logger;
  stateDir?: string;
  actors?: string[];
  natsUrl?: string;
}): Promise<LocalPlane> {
  const log = opts.log;
  let natsUrl = opts.natsUrl ?? process.env.NATS_URL ?? "nats://127.0.0.1:4222";
  let node: NatsServerNode | undefined;
  let natsDir: string | undefined;
  if (!(await natsAnswers(natsUrl))) {
    natsDir = await mkdtemp(join(tmpdir(), "evalfleet-nats-"));
    const spec = {
      name: "evalfleet-local",
      port: await freePort(),
      storeDir: join(natsDir, "store"),
      configFile: join(natsDir, "nats.conf"),
    };
    await writeNodeConfig(spec, [], undefined, "");
    node = new NatsServerNode(spec);
    await node.start();
    natsUrl = node.url;
    log.info({ natsUrl }, "started nats-server (no server answered at NATS_URL)");
  } else log.info({ natsUrl }, "using NATS");
  let db: Db;
  let dbLabel: string;
  if (process.env.DATABASE_URL) {
    db = await openResultsDb({ url: process.env.DATABASE_URL, log });
    dbLabel = "PostgreSQL (DATABASE_URL)";
  } else {
    const dataDir = resolve(opts.stateDir ?? ".evalfleet", "pglite");
    await mkdir(dataDir, { recursive: true });
    db = await openResultsDb({ dataDir, log });
    dbLabel = `embedded PGlite (${dataDir})`;
  }
  // The judge needs a gateway URL and its own key; without them it is left out rather than failing the plane.
  const judgeReady = Boolean((process.env.EVALFLEET_JUDGE_URL ?? process.env.EVALFLEET_GATEWAY_URL) && process.env.EVALFLEET_JUDGE_KEY);
  const names = opts.actors ?? actorNames().filter((n) => n !== "judge" || judgeReady);
  const running = await startActors(names, { log, db, servers: natsUrl });
  return {
    natsUrl,
    ownNats: node !== undefined,
    db,
    dbLabel,
    running,
    async stop() {
      await running.shutdown(10_000);
      await running.ctx.plane.close();
      await db.close();
      if (node) await node.stop();
      if (natsDir) await rm(natsDir, { recursive: true, force: true });
    },
  };
}
