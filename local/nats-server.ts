/**
 * Spawning nats-server with JetStream: used by `evalfleet up` when no server answers, and by the test rig.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import {
  type AccountSigner,
  createNatsAccounts,
  type NatsAccounts,
  operatorModeConfig,
  planeUserCreds,
  signerOf,
} from "../plane/nats-auth.js";

/** The nats-server binary when no setting names one (NATS_SERVER_BIN): whatever is on PATH (Debian: /usr/sbin). */
export const DEFAULT_NATS_SERVER_BIN = "nats-server";

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
  /** JetStream's file store limit (nats-server's `max_file_store`, e.g. "64MB"); default: the server's own */
  maxFileStore?: string;
}

/** One nats-server process with JetStream, on a free port, with a temp store that survives restarts. */
export class NatsServerNode {
  private proc: ChildProcess | undefined;
  private output = "";
  constructor(
    readonly spec: NodeSpec,
    /** the nats-server binary (the NATS_SERVER_BIN setting) */
    readonly bin: string = DEFAULT_NATS_SERVER_BIN,
  ) {}

  get url(): string {
    return `nats://127.0.0.1:${this.spec.port}`;
  }

  async start(timeoutMs = 15_000): Promise<void> {
    this.output = "";
    const proc = spawn(this.bin, ["-c", this.spec.configFile], { stdio: ["ignore", "pipe", "pipe"] });
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
    `jetstream { store_dir: "${spec.storeDir}"${spec.maxFileStore ? `, max_file_store: ${spec.maxFileStore}` : ""} }`,
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

/** A server's accounts as kept beside its store, and the plane user's credential file. */
export interface LocalNatsAuth {
  accounts: NatsAccounts;
  signer: AccountSigner;
  /** the operator-mode lines of the server config (plane/nats-auth.ts) */
  config: string;
  /** the plane user's `.creds` (mode 0600) */
  credsFile: string;
}

/**
 * The accounts of a nats-server whose files live in `dir`: read from `dir/accounts.json` when a server ran there
 * before (JetStream keeps data per account key, so a restarted server must get the same accounts), else made and
 * written (mode 0600). The plane user's credential is written to `dir/plane.creds`.
 */
export async function localNatsAuth(dir: string): Promise<LocalNatsAuth> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const file = join(dir, "accounts.json");
  let accounts: NatsAccounts;
  try {
    accounts = JSON.parse(await readFile(file, "utf8")) as NatsAccounts;
  } catch {
    accounts = await createNatsAccounts();
    await writeFile(file, JSON.stringify(accounts), { mode: 0o600 });
  }
  const signer = signerOf(accounts);
  const credsFile = join(dir, "plane.creds");
  await writeFile(credsFile, await planeUserCreds(signer), { mode: 0o600 });
  await chmod(credsFile, 0o600);
  return { accounts, signer, config: operatorModeConfig(accounts), credsFile };
}
