import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { freePort, NatsServerNode, type NodeSpec, writeNodeConfig } from "../../scripts/local/nats-server.js";

export { freePort, NatsServerNode, natsServerBin } from "../../scripts/local/nats-server.js";

/** A running test nats-server (or cluster) and how to reach, restart and remove it. */
export interface TestNats {
  url: string;
  /** All client URLs (one per node). */
  servers: string[];
  nodes: NatsServerNode[];
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
  opts: { extraConfig?: string; port?: () => Promise<number> } = {},
): Promise<TestNats> {
  const dir = await mkdtemp(join(tmpdir(), "ef-nats-"));
  const spec: NodeSpec = {
    name: "n1",
    port: await (opts.port ?? freePort)(),
    storeDir: join(dir, "store"),
    configFile: join(dir, "nats.conf"),
  };
  await writeNodeConfig(spec, [], undefined, opts.extraConfig ?? "");
  const node = new NatsServerNode(spec);
  await node.start();
  const opened: NatsConnection[] = [];
  return {
    url: node.url,
    servers: [node.url],
    nodes: [node],
    async connect(name = "test") {
      const nc = await connect({ servers: node.url, name, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
      opened.push(nc);
      return nc;
    },
    async restart(signal = "SIGTERM") {
      await node.restart(signal);
    },
    async cleanup() {
      await Promise.allSettled(opened.map((nc) => nc.close()));
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
  for (const s of specs) await writeNodeConfig(s, routes, "efc", "");
  const nodes = specs.map((s) => new NatsServerNode(s));
  await Promise.all(nodes.map((n) => n.start()));
  const servers = nodes.map((n) => n.url);
  const opened: NatsConnection[] = [];
  const connectAny = async (name = "test") => {
    const nc = await connect({ servers, name, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
    opened.push(nc);
    return nc;
  };
  // Wait until a stream on every node can be placed: JetStream requests fail until the cluster has elected a meta
  // leader, and an R{size} stream fails ("no suitable peers for placement") until every peer has joined it.
  const probe = await connectAny("probe");
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
    connect: connectAny,
    async restart(signal = "SIGTERM") {
      for (const n of nodes) await n.restart(signal);
    },
    async cleanup() {
      await Promise.allSettled(opened.map((nc) => nc.close()));
      await Promise.all(nodes.map((n) => n.stop("SIGKILL")));
      await rm(dir, { recursive: true, force: true });
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
