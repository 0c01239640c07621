/**
 * Spawning nats-server with JetStream: used by `evalfleet up` when no server answers, and by the test rig.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { createServer } from "node:net";

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

/** Where one nats-server node listens and keeps its store. */
export interface NodeSpec {
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

/** Write a node's config file: JetStream store, optional cluster routes, and any extra config (accounts). */
export async function writeNodeConfig(
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
