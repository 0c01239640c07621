/** One container the runtime created: start, exec, copy files in, wait with a timeout, kill, logs, remove. */
import type Dockerode from "dockerode";
import { ContainerError, toContainerError } from "./errors.js";
import { type Demuxed, demux, type TarFile, tarFiles } from "./tar.js";

export interface WaitOptions {
  /** Kill the container when it has not exited by then. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface WaitResult {
  /** null when it was killed for the timeout or the signal before it could report one. */
  exitCode: number | null;
  timedOut: boolean;
  aborted: boolean;
  /** The kernel's OOM killer ended it (the memory limit). */
  oomKilled: boolean;
}

export interface ExecOptions {
  user?: string;
  workdir?: string;
  env?: Record<string, string>;
  /** Stop reading after this long and report timedOut; the process keeps running until the container is killed. */
  timeoutMs?: number;
  signal?: AbortSignal;
  /** Output kept (raw frames); the rest is dropped and `truncated` set. Default 128 MiB. */
  maxOutputBytes?: number;
}

export interface ExecResult extends Demuxed {
  exitCode: number | null;
  timedOut: boolean;
  aborted: boolean;
  truncated: boolean;
}

const DEFAULT_MAX_OUTPUT = 128 * 1024 * 1024;

function envList(env: Record<string, string> | undefined): string[] | undefined {
  return env === undefined ? undefined : Object.entries(env).map(([k, v]) => `${k}=${v}`);
}

export class Container {
  constructor(
    private readonly inner: Dockerode.Container,
    readonly id: string,
    readonly name: string,
  ) {}

  async start(): Promise<void> {
    try {
      await this.inner.start();
    } catch (err) {
      throw toContainerError(err, "start", `starting container ${this.name}`);
    }
  }

  /** Wait for the main process to exit; past `timeoutMs` (or on abort) the container is killed first. */
  async wait(opts: WaitOptions = {}): Promise<WaitResult> {
    let timedOut = false;
    let aborted = false;
    const waiting = this.inner.wait().then(
      (r: { StatusCode?: number }) => ({ code: typeof r.StatusCode === "number" ? r.StatusCode : null }),
      (err: unknown) => ({ err }),
    );
    let timer: NodeJS.Timeout | undefined;
    const stop = new Promise<"timeout" | "abort">((resolve) => {
      if (opts.timeoutMs !== undefined) timer = setTimeout(() => resolve("timeout"), opts.timeoutMs);
      if (opts.signal?.aborted) resolve("abort");
      opts.signal?.addEventListener("abort", () => resolve("abort"), { once: true });
    });
    let first = await Promise.race([waiting, stop]);
    if (timer) clearTimeout(timer);
    if (first === "timeout" || first === "abort") {
      timedOut = first === "timeout";
      aborted = first === "abort";
      await this.kill();
      first = await waiting;
    }
    if ("err" in first) throw toContainerError(first.err, "runtime", `waiting for container ${this.name}`);
    let state = await this.state();
    // The daemon records an OOM kill from the kernel's event, which may land just after the exit it caused: a
    // SIGKILLed main process (137) we did not kill ourselves is looked at again for up to a second.
    for (let i = 0; i < 10 && first.code === 137 && !timedOut && !aborted && state && !state.OOMKilled; i++) {
      await new Promise((r) => setTimeout(r, 100));
      state = await this.state();
    }
    return {
      exitCode: timedOut || aborted ? null : first.code,
      timedOut,
      aborted,
      oomKilled: state?.OOMKilled === true,
    };
  }

  /** The daemon's State block, or null once the container is gone. */
  async state(): Promise<Dockerode.ContainerInspectInfo["State"] | null> {
    try {
      return (await this.inner.inspect()).State;
    } catch (err) {
      const e = toContainerError(err, "runtime", `inspecting container ${this.name}`);
      if (e.failure === "not_found") return null;
      throw e;
    }
  }

  /** SIGKILL (or `signal`); a container that is not running or already gone is fine. */
  async kill(signal = "SIGKILL"): Promise<void> {
    try {
      await this.inner.kill({ signal });
    } catch (err) {
      const e = toContainerError(err, "runtime", `killing container ${this.name}`);
      if (e.failure === "not_found" || e.status === 409 || e.status === 304) return;
      throw e;
    }
  }

  /** Remove it and its anonymous volumes, killing it if it runs. Idempotent. */
  async remove(): Promise<void> {
    try {
      await this.inner.remove({ force: true, v: true });
    } catch (err) {
      const e = toContainerError(err, "runtime", `removing container ${this.name}`);
      if (e.failure === "not_found") return;
      // 409 "removal already in progress": someone else is removing it.
      if (e.status === 409 && /already in progress/i.test(e.message)) return;
      throw e;
    }
  }

  /** stdout and stderr so far (the container must not use a TTY). `tail` lines only, when given. */
  async logs(opts: { tail?: number } = {}): Promise<Demuxed> {
    try {
      const raw = (await this.inner.logs({
        stdout: true,
        stderr: true,
        follow: false,
        ...(opts.tail !== undefined ? { tail: opts.tail } : {}),
      })) as unknown as Buffer;
      return demux(Buffer.isBuffer(raw) ? raw : Buffer.from(String(raw)));
    } catch (err) {
      throw toContainerError(err, "runtime", `reading the logs of container ${this.name}`);
    }
  }

  /**
   * How many processes the kernel's OOM killer ended in this container so far (its memory limit), read from the
   * cgroup (v1 memory.oom_control or v2 memory.events) by `cat` inside it; null when neither can be read. State's
   * OOMKilled only covers the main process, not an exec'd one.
   */
  async oomKills(): Promise<number | null> {
    const r = await this.exec(
      ["cat", "/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"],
      { user: "0", timeoutMs: 30_000 },
    ).catch(() => null);
    const m = r ? /^oom_kill (\d+)$/m.exec(r.stdout) : null;
    return m ? Number(m[1]) : null;
  }

  /**
   * Follow stdout and stderr as they come (attach before `start` to miss nothing). Chunks go to the callbacks;
   * the returned promise resolves once attached, `ended` when the streams close (the container exited).
   */
  async attachOutput(
    onStdout: (b: Buffer) => void,
    onStderr: (b: Buffer) => void,
  ): Promise<{ ended: Promise<void>; detach(): void }> {
    let stream: NodeJS.ReadableStream;
    try {
      stream = (await this.inner.attach({
        stream: true,
        stdout: true,
        stderr: true,
      })) as NodeJS.ReadableStream;
    } catch (err) {
      throw toContainerError(err, "runtime", `attaching to container ${this.name}`);
    }
    // The multiplexed stream: frames of an 8-byte header (stream type, 3 zero bytes, big-endian length) + payload.
    let pending: Buffer = Buffer.alloc(0);
    stream.on("data", (chunk: Buffer) => {
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      while (pending.length >= 8) {
        const len = pending.readUInt32BE(4);
        if (pending.length < 8 + len) break;
        const payload = pending.subarray(8, 8 + len);
        if (pending[0] === 2) onStderr(payload);
        else onStdout(payload);
        pending = pending.subarray(8 + len);
      }
    });
    const ended = new Promise<void>((resolve) => {
      stream.once("end", () => resolve());
      stream.once("close", () => resolve());
      stream.once("error", () => resolve());
    });
    return {
      ended,
      detach: () => (stream as unknown as { destroy?: () => void }).destroy?.(),
    };
  }

  /** Copy regular files into `dir` (which must exist) of the container, created or stopped alike. */
  async putFiles(dir: string, files: readonly TarFile[]): Promise<void> {
    try {
      await this.inner.putArchive(tarFiles(files), { path: dir });
    } catch (err) {
      throw toContainerError(err, "runtime", `copying files into ${this.name}:${dir}`);
    }
  }

  /** Run a command in the running container and collect its output and exit code. */
  async exec(cmd: readonly string[], opts: ExecOptions = {}): Promise<ExecResult> {
    let stream: NodeJS.ReadWriteStream;
    let exec: Dockerode.Exec;
    try {
      exec = await this.inner.exec({
        Cmd: [...cmd],
        AttachStdout: true,
        AttachStderr: true,
        Tty: false,
        ...(opts.user !== undefined ? { User: opts.user } : {}),
        ...(opts.workdir !== undefined ? { WorkingDir: opts.workdir } : {}),
        ...(opts.env !== undefined ? { Env: envList(opts.env) } : {}),
      });
      stream = (await exec.start({ hijack: true, stdin: false })) as NodeJS.ReadWriteStream;
    } catch (err) {
      throw toContainerError(err, "runtime", `exec ${cmd[0]} in ${this.name}`);
    }
    const max = opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT;
    const chunks: Buffer[] = [];
    let size = 0;
    let truncated = false;
    const ended = await new Promise<"end" | "timeout" | "abort" | Error>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const settle = (how: "end" | "timeout" | "abort" | Error): void => {
        if (timer) clearTimeout(timer);
        opts.signal?.removeEventListener("abort", onAbort);
        resolve(how);
      };
      const onAbort = (): void => settle("abort");
      if (opts.timeoutMs !== undefined) timer = setTimeout(() => settle("timeout"), opts.timeoutMs);
      if (opts.signal?.aborted) return settle("abort");
      opts.signal?.addEventListener("abort", onAbort, { once: true });
      stream.on("data", (b: Buffer) => {
        if (size + b.length > max) {
          truncated = true;
          return;
        }
        size += b.length;
        chunks.push(b);
      });
      stream.on("end", () => settle("end"));
      stream.on("close", () => settle("end"));
      stream.on("error", (err: Error) => settle(err));
    });
    const out = demux(Buffer.concat(chunks));
    if (ended !== "end") {
      (stream as unknown as { destroy?: () => void }).destroy?.();
      if (ended instanceof Error) throw toContainerError(ended, "runtime", `exec ${cmd[0]} in ${this.name}`);
      return { ...out, exitCode: null, timedOut: ended === "timeout", aborted: ended === "abort", truncated };
    }
    let exitCode: number | null = null;
    try {
      const info = await exec.inspect();
      exitCode = typeof info.ExitCode === "number" ? info.ExitCode : null;
    } catch (err) {
      throw toContainerError(err, "runtime", `reading the exit code of ${cmd[0]} in ${this.name}`);
    }
    return { ...out, exitCode, timedOut: false, aborted: false, truncated };
  }
}

export { ContainerError };
