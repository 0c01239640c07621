/**
 * Child processes, a private PostgreSQL and a seeded RNG for the chaos run. Every process started here is tracked
 * so `killAll()` can end it on any exit path.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { createWriteStream, existsSync, type WriteStream } from "node:fs";
import { chown, mkdir } from "node:fs/promises";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";

const exec = promisify(execFile);

/** mulberry32: small, fast, reproducible from a printed seed. */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/** A restartable child process whose output goes to a log file. */
export class Proc {
  private child: ChildProcess | undefined;
  private out: WriteStream;
  starts = 0;
  constructor(
    readonly name: string,
    private readonly cmd: string,
    private readonly args: string[],
    private readonly env: NodeJS.ProcessEnv,
    logFile: string,
  ) {
    this.out = createWriteStream(logFile, { flags: "a" });
  }

  start(): void {
    this.starts++;
    const child = spawn(this.cmd, this.args, { env: this.env, stdio: ["ignore", "pipe", "pipe"] });
    child.stdout?.pipe(this.out, { end: false });
    child.stderr?.pipe(this.out, { end: false });
    child.on("error", (err) => this.out.write(`spawn error: ${String(err)}\n`));
    this.child = child;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get alive(): boolean {
    const c = this.child;
    return c !== undefined && c.exitCode === null && c.signalCode === null;
  }

  /** Send `signal` and wait for the exit (SIGKILL after 5 s). */
  async kill(signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
    const c = this.child;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const done = new Promise<void>((resolve) => c.once("exit", () => resolve()));
    c.kill(signal);
    const t = setTimeout(() => c.kill("SIGKILL"), 5_000);
    await done;
    clearTimeout(t);
  }

  close(): void {
    this.out.end();
  }
}

/** Wait until `text` appears in a log file (a child's "ready" line). */
export async function waitForLog(file: string, text: string | RegExp, ms: number): Promise<void> {
  const { readFile } = await import("node:fs/promises");
  const deadline = Date.now() + ms;
  for (;;) {
    const s = await readFile(file, "utf8").catch(() => "");
    if (typeof text === "string" ? s.includes(text) : text.test(s)) return;
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${String(text)} in ${file}:\n${s.slice(-3000)}`);
    await sleep(100);
  }
}

/**
 * A private PostgreSQL (initdb + pg_ctl into a temp dir, its own port): ours to crash and restart without touching
 * anything else on the machine. As root, the server runs as the `postgres` user.
 */
export class PrivatePg {
  private constructor(
    readonly dir: string,
    readonly port: number,
    private readonly bin: string,
    private readonly asUser: string | undefined,
  ) {}

  get adminUrl(): string {
    return `postgres://postgres@127.0.0.1:${this.port}/postgres`;
  }

  static findBin(): string | undefined {
    for (const d of [
      "/usr/lib/postgresql/15/bin",
      "/usr/lib/postgresql/16/bin",
      "/usr/local/bin",
      "/usr/bin",
    ])
      if (existsSync(join(d, "initdb")) && existsSync(join(d, "pg_ctl"))) return d;
    return undefined;
  }

  static async create(dir: string, port: number): Promise<PrivatePg> {
    const bin = PrivatePg.findBin();
    if (!bin) throw new Error("initdb / pg_ctl not found");
    const asUser = process.getuid?.() === 0 ? "postgres" : undefined;
    const data = join(dir, "data");
    await mkdir(data, { recursive: true });
    if (asUser) {
      const { stdout } = await exec("id", ["-u", asUser]);
      const { stdout: g } = await exec("id", ["-g", asUser]);
      await chown(dir, Number(stdout.trim()), Number(g.trim()));
      await chown(data, Number(stdout.trim()), Number(g.trim()));
    }
    const pg = new PrivatePg(dir, port, bin, asUser);
    await pg.run("initdb", ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync"]);
    await pg.start();
    return pg;
  }

  private async run(tool: string, args: string[]): Promise<string> {
    const cmd = join(this.bin, tool);
    const r = this.asUser
      ? await exec("su", [this.asUser, "-s", "/bin/sh", "-c", [cmd, ...args].map(shq).join(" ")], {
          timeout: 60_000,
        })
      : await exec(cmd, args, { timeout: 60_000 });
    return r.stdout + r.stderr;
  }

  async start(): Promise<void> {
    const opts = `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 -c max_connections=300 -c fsync=off`;
    await this.run("pg_ctl", [
      "-D",
      join(this.dir, "data"),
      "-l",
      join(this.dir, "pg.log"),
      "-o",
      opts,
      "-w",
      "start",
    ]);
  }

  /** Crash: immediate shutdown (no checkpoint, like a power cut for the server's clients). */
  async crash(): Promise<void> {
    await this.run("pg_ctl", ["-D", join(this.dir, "data"), "-m", "immediate", "-w", "stop"]);
  }

  async stop(): Promise<void> {
    await this.run("pg_ctl", ["-D", join(this.dir, "data"), "-m", "immediate", "-w", "stop"]).catch(() => "");
  }
}

function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
