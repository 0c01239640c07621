import { spawn } from "node:child_process";
import { createWriteStream, type WriteStream } from "node:fs";

/** Raw bytes kept per stream before redaction: well over the 50 KB stored, so a cut never splits a secret there. */
const KEEP_BYTES = 512 * 1024;

/** A stream's tail, bounded in memory however much a harness prints; optionally teed whole to a file. */
export class Tail {
  private chunks: Buffer[] = [];
  private size = 0;
  total = 0;
  constructor(private readonly tee?: WriteStream) {}
  push(b: Buffer): void {
    this.tee?.write(b);
    this.chunks.push(b);
    this.size += b.length;
    this.total += b.length;
    while (this.size - (this.chunks[0]?.length ?? 0) >= KEEP_BYTES)
      this.size -= this.chunks.shift()?.length ?? 0;
  }
  text(): string {
    const all = Buffer.concat(this.chunks);
    return all.subarray(Math.max(0, all.length - KEEP_BYTES)).toString("utf8");
  }
}

export type StopReason = "timeout" | "cap" | "cancel";

export interface HarnessExit {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  /** why evalfleet stopped the harness, if it did */
  stoppedFor: StopReason | null;
  spawnError: string | null;
  stdout: string;
  stderr: string;
  durationMs: number;
}

/** The fields of a harness's exit the supervisor knows; harnessExit adds the output and the duration. */
export type ExitFields = Pick<HarnessExit, "exitCode" | "signal" | "stoppedFor" | "spawnError">;

/** A harness's exit: how it ended, its output tails, and the time since `started`. */
export function harnessExit(fields: ExitFields, out: Tail, err: Tail, started: number): HarnessExit {
  return { ...fields, stdout: out.text(), stderr: err.text(), durationMs: Date.now() - started };
}

/** What to run as the harness, and how long it may take; every sandbox kind takes the same. */
export interface SuperviseOptions {
  command: string;
  args: string[];
  cwd: string;
  env: Record<string, string>;
  timeoutMs: number;
  /** between SIGTERM and SIGKILL when it is stopped (default 3 s) */
  graceMs?: number;
  /** where all of stdout goes, when the harness's trajectory is its stdout */
  stdoutFile?: string;
}

export interface Supervised {
  pid: number | undefined;
  /** stop the whole process group: SIGTERM, then SIGKILL after the grace period */
  stop(reason: StopReason): void;
  done: Promise<HarnessExit>;
}

/**
 * Run the harness in its own process group (it spawns shells, language servers, MCP servers: stopping it must stop
 * them all), with a wall-clock timeout. Output is captured as a bounded tail; `stdoutFile` gets all of stdout when
 * the harness's trajectory is its stdout.
 */
export function superviseHarness(opts: SuperviseOptions): Supervised {
  const started = Date.now();
  const grace = opts.graceMs ?? 3_000;
  const tee = opts.stdoutFile ? createWriteStream(opts.stdoutFile) : undefined;
  const out = new Tail(tee);
  const err = new Tail();
  let stoppedFor: StopReason | null = null;
  let spawnError: string | null = null;
  const child = spawn(opts.command, opts.args, {
    cwd: opts.cwd,
    env: opts.env,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout?.on("data", (b: Buffer) => out.push(b));
  child.stderr?.on("data", (b: Buffer) => err.push(b));
  const killGroup = (sig: NodeJS.Signals) => {
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, sig);
    } catch {
      // the group is gone already
    }
  };
  let killTimer: NodeJS.Timeout | undefined;
  const stop = (reason: StopReason) => {
    if (stoppedFor !== null || child.exitCode !== null || child.signalCode !== null) return;
    stoppedFor = reason;
    killGroup("SIGTERM");
    killTimer = setTimeout(() => killGroup("SIGKILL"), grace);
  };
  const timer = setTimeout(() => stop("timeout"), opts.timeoutMs);
  const done = new Promise<HarnessExit>((resolve) => {
    let settled = false;
    const finish = (exitCode: number | null, signal: NodeJS.Signals | null) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (killTimer) clearTimeout(killTimer);
      // Whatever the harness left running in its group goes with it.
      killGroup("SIGKILL");
      const result = () =>
        resolve(harnessExit({ exitCode, signal, stoppedFor, spawnError }, out, err, started));
      if (tee) tee.end(result);
      else result();
    };
    child.once("error", (e) => {
      spawnError = e.message;
      finish(null, null);
    });
    // 'close' waits for the pipes; a grandchild holding them open is killed above, so also settle on 'exit'.
    child.once("close", (code, sig) => finish(code, sig));
    child.once("exit", (code, sig) => {
      setTimeout(() => finish(code, sig), 1_000).unref();
    });
  });
  return { pid: child.pid, stop, done };
}
