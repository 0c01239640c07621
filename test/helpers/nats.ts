import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  type ConnectionOptions,
  connect,
  credsAuthenticator,
  type NatsConnection,
} from "@nats-io/transport-node";
import { type NatsSettings, natsAt } from "../../config/index.js";
import {
  freePort,
  type LocalNatsAuth,
  localNatsAuth,
  NatsServerNode,
  type NodeSpec,
  writeNodeConfig,
} from "../../local/nats-server.js";
import type { AccountSigner } from "../../plane/nats-auth.js";

export { freePort, NatsServerNode } from "../../local/nats-server.js";

/** The test rig's nats-server binary: NATS_SERVER_BIN when set (a test may read its own setup from the env). */
const BIN = process.env.NATS_SERVER_BIN || undefined;

/**
 * A running test nats-server (or cluster) and how to reach, restart and remove it. Every test server runs in
 * operator mode like `evalfleet up`'s (plane/nats-auth.ts): no anonymous connection; the test and the plane it
 * starts connect as the plane user (`settings`, `connectOptions`, `env`), tasks as their attempt's user.
 */
export interface TestNats {
  url: string;
  /** All client URLs (one per node). */
  servers: string[];
  nodes: NatsServerNode[];
  /** the plane user's `.creds` file */
  creds: string;
  /** the connection as NatsSettings, signing key included: `openPlane({ nats: nats.settings, … })`, actor settings */
  settings: NatsSettings;
  /** nats.js options for a raw `connect({ ...nats.connectOptions, … })` */
  connectOptions: Pick<ConnectionOptions, "servers" | "authenticator">;
  /** the variables that give a child process this connection: NATS_URL and NATS_CREDS */
  env: { NATS_URL: string; NATS_CREDS: string };
  /** the account's signing key, to mint attempt users (`natsSigner` of a dispatcher) */
  signer: AccountSigner;
  connect(name?: string): Promise<NatsConnection>;
  restart(signal?: NodeJS.Signals): Promise<void>;
  cleanup(): Promise<void>;
}

/**
 * Start a nats-server with JetStream on a free port (from `opts.port`, default any free port) and a temp store.
 * `extraConfig` is appended to the config file (e.g. an accounts block). Call `cleanup()` at the end: it stops the
 * server and removes the store.
 */
export async function startNats(
  opts: { extraConfig?: string; port?: () => Promise<number>; maxFileStore?: string } = {},
): Promise<TestNats> {
  const dir = await mkdtemp(join(tmpdir(), "ef-nats-"));
  const spec: NodeSpec = {
    name: "n1",
    port: await (opts.port ?? freePort)(),
    storeDir: join(dir, "store"),
    configFile: join(dir, "nats.conf"),
    ...(opts.maxFileStore ? { maxFileStore: opts.maxFileStore } : {}),
  };
  const auth = await localNatsAuth(join(dir, "auth"));
  await writeNodeConfig(spec, [], undefined, [auth.config, opts.extraConfig ?? ""].join("\n"));
  const node = new NatsServerNode(spec, BIN);
  await node.start();
  const { closeOpened, ...access } = accessOf([node.url], auth);
  return {
    url: node.url,
    servers: [node.url],
    nodes: [node],
    ...access,
    async restart(signal = "SIGTERM") {
      await node.restart(signal);
    },
    async cleanup() {
      await closeOpened();
      await node.stop("SIGKILL");
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A three-node JetStream cluster on free ports (from `opts.port`, default any free port), each node with its own
 * temp store.
 */
export async function startNatsCluster(
  size = 3,
  opts: { port?: () => Promise<number> } = {},
): Promise<TestNats> {
  const dir = await mkdtemp(join(tmpdir(), "ef-natsc-"));
  const port = opts.port ?? freePort;
  const specs: NodeSpec[] = [];
  for (let i = 0; i < size; i++) {
    specs.push({
      name: `n${i + 1}`,
      port: await port(),
      clusterPort: await port(),
      storeDir: join(dir, `store${i + 1}`),
      configFile: join(dir, `nats${i + 1}.conf`),
    });
  }
  const routes = specs.map((s) => s.clusterPort!);
  const auth = await localNatsAuth(join(dir, "auth"));
  for (const s of specs) await writeNodeConfig(s, routes, "efc", auth.config);
  const nodes = specs.map((s) => new NatsServerNode(s, BIN));
  await Promise.all(nodes.map((n) => n.start()));
  const servers = nodes.map((n) => n.url);
  const { closeOpened, ...access } = accessOf(servers, auth);
  // Wait until a stream on every node can be placed: JetStream requests fail until the cluster has elected a meta
  // leader, and an R{size} stream fails ("no suitable peers for placement") until every peer has joined it.
  const probe = await access.connect("probe");
  const { jetstreamManager } = await import("@nats-io/jetstream");
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      const jsm = await jetstreamManager(probe, { timeout: 2_000 });
      await jsm.getAccountInfo();
      await jsm.streams.add({
        name: "EF_PLACEMENT_PROBE",
        subjects: ["ef.placement.probe"],
        num_replicas: size,
      });
      await jsm.streams.delete("EF_PLACEMENT_PROBE");
      break;
    } catch (err) {
      if (Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  return {
    url: servers[0]!,
    servers,
    nodes,
    ...access,
    async restart(signal = "SIGTERM") {
      for (const n of nodes) await n.restart(signal);
    },
    async cleanup() {
      await closeOpened();
      await Promise.all(nodes.map((n) => n.stop("SIGKILL")));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** The plane user's connection in a child process a test started with `nats.env` (NATS_URL and NATS_CREDS). */
export function natsFromEnv(env: NodeJS.ProcessEnv = process.env): NatsSettings {
  return natsAt(env.NATS_URL ?? "", { auth: { kind: "creds", file: env.NATS_CREDS ?? "" } });
}

/** How a test (or a child it starts) connects as the plane user of a server with these accounts. */
/**
 * How a test reaches the plane user: its credentials in every form, and connect(), which reconnects for ever
 * (servers restart in tests) and remembers what it opened for closeOpened().
 */
function accessOf(
  servers: string[],
  auth: LocalNatsAuth,
): Pick<TestNats, "creds" | "settings" | "connectOptions" | "env" | "signer" | "connect"> & {
  closeOpened(): Promise<void>;
} {
  const opened: NatsConnection[] = [];
  const connectOptions = { servers, authenticator: credsAuthenticator(readFileSync(auth.credsFile)) };
  return {
    creds: auth.credsFile,
    settings: natsAt(servers, { auth: { kind: "creds", file: auth.credsFile }, signer: auth.signer }),
    connectOptions,
    env: { NATS_URL: servers.join(","), NATS_CREDS: auth.credsFile },
    signer: auth.signer,
    async connect(name = "test") {
      const nc = await connect({ ...connectOptions, name, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
      opened.push(nc);
      return nc;
    },
    async closeOpened() {
      await Promise.allSettled(opened.map((nc) => nc.close()));
    },
  };
}

/** NATS subject matching, as the server does it for permissions: `*` is one token, `>` the rest. */
export function subjectMatches(pattern: string, subject: string): boolean {
  const p = pattern.split(".");
  const s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    if (p[i] === ">") return s.length > i;
    if (i >= s.length || (p[i] !== "*" && p[i] !== s[i])) return false;
  }
  return p.length === s.length;
}
