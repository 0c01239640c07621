import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, type NatsConnection } from "@nats-io/transport-node";

/** Path of the nats-server binary: NATS_SERVER_BIN, else whatever is on PATH (Debian puts it in /usr/sbin). */
export function natsServerBin(): string {
  return process.env.NATS_SERVER_BIN ?? "nats-server";
}

/** A free TCP port on 127.0.0.1 (bound, read, released). */
export async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
    });
  });
}

interface NodeSpec {
  name: string;
  port: number;
  clusterPort?: number;
  storeDir: string;
  configFile: string;
}

/** One nats-server process with JetStream, on a free port, with a temp store that survives restarts. */
export class NatsServerNode {
  private proc: ChildProcess | undefined;
  private output = "";
  constructor(readonly spec: NodeSpec) {}

  get url(): string {
    return `nats://127.0.0.1:${this.spec.port}`;
  }

  async start(timeoutMs = 15_000): Promise<void> {
    this.output = "";
    const proc = spawn(natsServerBin(), ["-c", this.spec.configFile], { stdio: ["ignore", "pipe", "pipe"] });
    this.proc = proc;
    proc.stdout?.on("data", (d: Buffer) => {
      this.output += d.toString();
    });
    proc.stderr?.on("data", (d: Buffer) => {
      this.output += d.toString();
    });
    const exited = new Promise<never>((_, reject) =>
      proc.once("exit", (code) => reject(new Error(`nats-server exited with ${code}:\n${this.output}`))),
    );
    exited.catch(() => {});
    await Promise.race([this.waitReady(timeoutMs), exited]);
  }

  private async waitReady(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (/Server is ready/.test(this.output)) {
        // JetStream may still be recovering: wait for a connection to answer a JetStream request.
        return;
      }
      if (Date.now() > deadline)
        throw new Error(`nats-server did not become ready in ${timeoutMs} ms:\n${this.output}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** SIGKILL (crash) or SIGTERM (clean) the server, keeping its store. */
  async stop(signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
    const proc = this.proc;
    if (!proc || proc.exitCode !== null || proc.signalCode !== null) return;
    const done = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
    proc.kill(signal);
    const timer = setTimeout(() => proc.kill("SIGKILL"), 5_000);
    await done;
    clearTimeout(timer);
    this.proc = undefined;
  }

  async restart(signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
    await this.stop(signal);
    await this.start();
  }

  get running(): boolean {
    return this.proc !== undefined && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  get logs(): string {
    return this.output;
  }
}

async function writeNodeConfig(
  spec: NodeSpec,
  routes: number[],
  clusterName: string | undefined,
  extra: string,
): Promise<void> {
  const lines = [
    `server_name: ${spec.name}`,
    "listen: 127.0.0.1:" + spec.port,
    `jetstream { store_dir: "${spec.storeDir}" }`,
    "max_payload: 8MB",
  ];
  if (clusterName && spec.clusterPort) {
    lines.push(
      `cluster { name: ${clusterName}, listen: 127.0.0.1:${spec.clusterPort}, routes: [${routes
        .filter((p) => p !== spec.clusterPort)
        .map((p) => `nats-route://127.0.0.1:${p}`)
        .join(", ")}] }`,
    );
  }
  if (extra) lines.push(extra);
  await writeFile(spec.configFile, lines.join("\n") + "\n");
}

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
 * Start a nats-server with JetStream on a free port and a temp store. `extraConfig` is appended to the config file
 * (e.g. an accounts block). Call `cleanup()` at the end: it stops the server and removes the store.
 */
export async function startNats(opts: { extraConfig?: string } = {}): Promise<TestNats> {
  const dir = await mkdtemp(join(tmpdir(), "ef-nats-"));
  const spec: NodeSpec = {
    name: "n1",
    port: await freePort(),
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

/** A three-node JetStream cluster on free ports, each node with its own temp store. */
export async function startNatsCluster(size = 3): Promise<TestNats> {
  const dir = await mkdtemp(join(tmpdir(), "ef-natsc-"));
  const specs: NodeSpec[] = [];
  for (let i = 0; i < size; i++) {
    specs.push({
      name: `n${i + 1}`,
      port: await freePort(),
      clusterPort: await freePort(),
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
  // Wait for the meta leader: JetStream requests fail until the cluster has elected one.
  const probe = await connectAny("probe");
  const { jetstreamManager } = await import("@nats-io/jetstream");
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      const jsm = await jetstreamManager(probe, { timeout: 2_000 });
      await jsm.getAccountInfo();
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
