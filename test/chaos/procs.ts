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

/**
 * A restartable child process whose output goes to a log file. An exit nobody asked for (kill() was not called) is
 * reported to `onCrash`, as a supervisor would see it.
 */
export class Proc {
  private child: ChildProcess | undefined;
  private out: WriteStream;
  starts = 0;
  onCrash: ((how: string, upMs: number) => void) | undefined;
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
    const startedAt = Date.now();
    child.once("exit", (code, sig) => {
      if (!this.killing.has(child))
        this.onCrash?.(sig ? `killed by ${sig}` : `exited with code ${code}`, Date.now() - startedAt);
    });
    this.child = child;
  }

  private readonly killing = new WeakSet<ChildProcess>();

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
    this.killing.add(c);
    c.kill(signal);
    const t = setTimeout(() => c.kill("SIGKILL"), 5_000);
    await done;
    clearTimeout(t);
  }

  close(): void {
    this.out.end();
  }
}

/**
 * A free port below the kernel's ephemeral range, for a server restarted on the same port: a port from that range
 * may meanwhile become the source port of one of the run's thousands of outgoing connections, and the restart then
 * fails with EADDRINUSE for as long as that connection lives.
 */
export async function stablePort(): Promise<number> {
  const { readFile } = await import("node:fs/promises");
  const { createServer } = await import("node:net");
  const range = await readFile("/proc/sys/net/ipv4/ip_local_port_range", "utf8").catch(() => "32768");
  const top = Number(range.trim().split(/\s+/)[0]) || 32_768;
  const free = (port: number) =>
    new Promise<boolean>((resolve) => {
      const srv = createServer();
      srv.once("error", () => resolve(false));
      srv.listen(port, "127.0.0.1", () => srv.close(() => resolve(true)));
    });
  for (let i = 0; i < 500; i++) {
    const port = 20_000 + Math.floor(Math.random() * (top - 20_000));
    if (await free(port)) return port;
  }
  throw new Error(`no free port between 20000 and ${top}`);
}

/** A process's environment from /proc (null when it is gone or unreadable). */
export async function procEnv(pid: number): Promise<Map<string, string> | null> {
  const { readFile } = await import("node:fs/promises");
  try {
    const raw = await readFile(`/proc/${pid}/environ`, "utf8");
    const env = new Map<string, string>();
    for (const kv of raw.split("\0")) {
      const i = kv.indexOf("=");
      if (i > 0) env.set(kv.slice(0, i), kv.slice(i + 1));
    }
    return env;
  } catch {
    return null;
  }
}

/** Every live process whose environment has `name=value` (the chaos run marks what it starts, children included). */
export async function pidsWithEnv(name: string, value: string): Promise<number[]> {
  const { readdir } = await import("node:fs/promises");
  const pids = (await readdir("/proc")).filter((d) => /^\d+$/.test(d)).map(Number);
  const out: number[] = [];
  for (const pid of pids) if ((await procEnv(pid))?.get(name) === value) out.push(pid);
  return out;
}

/** SIGKILL every process marked `name=value`; how many there were. */
export async function killMarked(name: string, value: string): Promise<number> {
  const pids = (await pidsWithEnv(name, value)).filter((p) => p !== process.pid);
  for (const pid of pids) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // gone meanwhile
    }
  }
  return pids.length;
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
