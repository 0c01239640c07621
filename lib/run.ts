/** Running a child process with a timeout and an abort signal, output kept in arrival order. */
import { spawn } from "node:child_process";

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
  /** stdout and stderr interleaved as they arrived, like the harness's demuxed docker exec stream. */
  combined: string;
  timedOut: boolean;
  aborted: boolean;
  /** Set when the process could not be started at all (ENOENT, EACCES…). */
  spawnError?: Error;
}

export interface RunOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  timeoutMs?: number;
  signal?: AbortSignal;
}

/**
 * Run `cmd args`. The child gets its own process group so a timeout or abort kills everything it
 * started (a test runner's workers included), not just the direct child.
 */
export function run(cmd: string, args: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
  return new Promise((resolve) => {
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const all: Buffer[] = [];
    let timedOut = false;
    let aborted = false;
    let settled = false;
    const child = spawn(cmd, args, {
      cwd: opts.cwd,
      // absent: the child inherits this process's environment (Node's default)
      env: opts.env,
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    const killGroup = (): void => {
      if (child.pid === undefined) return;
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        child.kill("SIGKILL");
      }
    };
    const timer =
      opts.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true;
            killGroup();
          }, opts.timeoutMs);
    const onAbort = (): void => {
      aborted = true;
      killGroup();
    };
    if (opts.signal?.aborted) onAbort();
    else opts.signal?.addEventListener("abort", onAbort, { once: true });
    child.stdout.on("data", (b: Buffer) => {
      out.push(b);
      all.push(b);
    });
    child.stderr.on("data", (b: Buffer) => {
      err.push(b);
      all.push(b);
    });
    const finish = (code: number | null, spawnError?: Error): void => {
      if (settled) return;
      settled = true;
      if (timer) clearTimeout(timer);
      opts.signal?.removeEventListener("abort", onAbort);
      const result: RunResult = {
        code,
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: Buffer.concat(err).toString("utf8"),
        combined: Buffer.concat(all).toString("utf8"),
        timedOut,
        aborted,
      };
      if (spawnError) result.spawnError = spawnError;
      resolve(result);
    };
    child.on("error", (e) => finish(null, e));
    child.on("close", (code) => finish(code));
  });
}
