import { mkdir } from "node:fs/promises";
import { join, resolve } from "node:path";
import { connect } from "@nats-io/transport-node";
import { actorNames } from "../../actors/index.js";
import { openResultsDb, type RunningActors, startActors } from "../../actors/runtime/main.js";
import { createRunKey } from "../../gateway-sidecar/keys.js";
import { type AliasDef, type Gateway, startGateway } from "../../gateway-sidecar/server.js";
import type { RunConfig } from "../../protocol/config.js";
import type { Logger } from "../../protocol/log.js";
import type { Db } from "../../store/db.js";
import { freePort, NatsServerNode, writeNodeConfig } from "./nats-server.js";
import { type LocalUpstreams, localUpstreams, SAMPLE_LIBRARY } from "./providers.js";

/** The whole plane on one machine, and how to stop it. */
export interface LocalPlane {
  natsUrl: string;
  /** true when `up` started its own nats-server (and will remove its store) */
  ownNats: boolean;
  db: Db;
  dbLabel: string;
  gateway: Gateway;
  upstreams: LocalUpstreams;
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
 * Aliases are model names from the runs' configs: each resolves to its model's provider upstream (the scripted
 * provider, or the real provider whose key only the gateway holds). Looked up in run_metadata and cached.
 */
function aliasResolver(db: Db, up: LocalUpstreams): (alias: string) => Promise<AliasDef | undefined> {
  const cache = new Map<string, AliasDef | undefined>();
  return async (alias) => {
    if (cache.has(alias)) return cache.get(alias);
    const rows = await db.query<{ config_json: string }>(
      "SELECT config_json FROM run_metadata ORDER BY created_at DESC",
    );
    for (const r of rows.rows) {
      const cfg = JSON.parse(r.config_json) as RunConfig;
      const model = cfg.models.find((m) => (m.alias ?? m.name) === alias);
      const upstream = model ? up.upstreams[model.provider] : undefined;
      if (model && upstream) {
        const def: AliasDef = { upstream, model: model.alias ?? model.name };
        cache.set(alias, def);
        return def;
      }
    }
    return undefined;
  };
}

/**
 * Start the plane in this process: NATS_URL when it answers, else a nats-server of our own (JetStream, a temp
 * store); DATABASE_URL, else embedded PGlite under `stateDir`; real providers when their keys are set, else the
 * scripted provider; the gateway in front of them; then every actor (the dispatcher launching local processes).
 */
export async function startLocalPlane(opts: {
  log: Logger;
  stateDir?: string;
  actors?: string[];
  natsUrl?: string;
  /** start a nats-server of our own even if one answers at NATS_URL */
  ownNats?: boolean;
  libraryDir?: string;
  /** the gateway's port (0: any free port) */
  gatewayPort?: number;
}): Promise<LocalPlane> {
  const log = opts.log;
  const stateDir = resolve(opts.stateDir ?? ".evalfleet");
  let natsUrl = opts.natsUrl ?? process.env.NATS_URL ?? "nats://127.0.0.1:4222";
  let node: NatsServerNode | undefined;
  let natsDir: string | undefined;
  if (opts.ownNats || !(await natsAnswers(natsUrl))) {
    // The store lives with the rest of the state, so patches and trajectories outlive the plane (report --export)
    // and a plane started again picks up where a crashed one stopped.
    natsDir = join(stateDir, "nats");
    await mkdir(natsDir, { recursive: true });
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
    const dataDir = join(stateDir, "pglite");
    await mkdir(dataDir, { recursive: true });
    db = await openResultsDb({ dataDir, log });
    dbLabel = `embedded PGlite (${dataDir})`;
  }
  const upstreams = await localUpstreams(opts.libraryDir ?? SAMPLE_LIBRARY);
  const gateway = await startGateway({
    db,
    resolveAlias: aliasResolver(db, upstreams),
    log: log.child({ part: "gateway" }),
  });
  // What the actors and the tasks they launch need to reach the gateway; tasks read their run's key from KV.
  process.env.EVALFLEET_UPSTREAM_URL ??= gateway.url;
  process.env.EVALFLEET_GATEWAY_URL ??= gateway.url;
  process.env.EVALFLEET_WORKDIR ??= join(stateDir, "work");
  process.env.EVALFLEET_GIT_MIRRORS ??= join(stateDir, "mirrors");
  if (!process.env.EVALFLEET_JUDGE_KEY)
    process.env.EVALFLEET_JUDGE_KEY = await createRunKey(db, "evalfleet-judge");
  process.env.NATS_URL = natsUrl;
  const running = await startActors(opts.actors ?? actorNames(), { log, db, servers: natsUrl });
  return {
    natsUrl,
    ownNats: node !== undefined,
    db,
    dbLabel,
    gateway,
    upstreams,
    running,
    async stop() {
      await running.shutdown(10_000);
      await running.ctx.plane.close();
      await gateway.close();
      await upstreams.scripted?.close();
      await db.close();
      if (node) await node.stop();
    },
  };
}
