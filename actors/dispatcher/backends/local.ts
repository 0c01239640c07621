import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import { hostname } from "node:os";
import { fileURLToPath } from "node:url";
import { CREDS_ON_STDIN, NATS_USER_ENV } from "../../../config/index.js";
import { type Logger, silentLogger } from "../../../lib/log.js";
import { cliCommand } from "../../../lib/self.js";
import { MAX_STREAM_BYTES } from "../../../protocol/redact.js";
import { HARNESS_GROUP_LINE, harnessGroupsIn, JobRefEnv } from "../../../protocol/task.js";
import { ATTEMPT_LABEL, attemptLabel } from "../../../task/sandbox.js";
import {
  resolveSandbox,
  SANDBOX_ENV,
  type SandboxDecision,
  sandboxLine,
} from "../../../task/sandbox-select.js";
import { observeTracked } from "./tracked.js";
import type { JobRef, LaunchBackend, LaunchRef, StopClass, TaskState } from "./types.js";

export interface LocalBackendOptions {
  /** the command that runs one task (default: this evalfleet's own CLI, `task`, from source or compiled as this process runs) */
  command?: string[];
  cwd?: string;
  /**
   * The environment every task gets besides its job reference: the task role's settings (config's `taskEnv`:
   * NATS connection, gateway URL, folders), over `inheritedEnv`.
   */
  env: Record<string, string>;
  /** the dispatcher's own environment as it was started (PATH, HOME, …), handed on under `env` */
  inheritedEnv?: Readonly<Record<string, string | undefined>>;
  /** SIGTERM → SIGKILL after this long */
  stopGraceMs?: number;
  log?: Logger;
  /**
   * Where the tasks run their harnesses (EVALFLEET_SANDBOX): `auto` (default) decides once, at the first launch —
   * a container per attempt when a Docker API answers, else unsandboxed processes (said in the log).
   */
  sandbox?: "auto" | "container" | "process";
}

interface LocalTask {
  ref: JobRef;
  child: ChildProcess;
  phase: TaskState["phase"];
  stop?: StopClass;
  stdout: string;
  stderr: string;
  killTimer?: NodeJS.Timeout;
  /** stop() was called: an exit by signal is then ours */
  stopRequested?: boolean;
  /** process groups of the harnesses the task started (it announces them on stderr) */
  harnessGroups: Set<number>;
  /** the end of the last stderr chunk, in case an announcement was split across two */
  stderrCarry: string;
}

const REPO = fileURLToPath(new URL("../../../", import.meta.url));

/** Keep the tail of a stream within twice the stored limit (the result is cut again when stored). */
function append(buf: string, chunk: Buffer): string {
  const s = buf + chunk.toString("utf8");
  return s.length > 2 * MAX_STREAM_BYTES ? s.slice(s.length - 2 * MAX_STREAM_BYTES) : s;
}

/**
 * One child process per attempt, told only its job reference (JobRefEnv) plus where NATS and the database are;
 * the task fetches the rest. Observed by process exit: a task that dies without publishing a result is reported
 * by the dispatcher from the exit it sees here.
 */
export class LocalBackend implements LaunchBackend {
  readonly name = "local";
  readonly tasksConnect = true;
  private readonly tasks = new Map<string, LocalTask>();
  private seq = 0;
  private readonly log: Logger;
  private decided: Promise<SandboxDecision> | undefined;
  private sandbox: SandboxDecision | undefined;

  constructor(private readonly opts: LocalBackendOptions) {
    this.log = opts.log ?? silentLogger();
  }

  /** The sandbox every task of this backend uses, decided once. */
  decideSandbox(): Promise<SandboxDecision> {
    this.decided ??= resolveSandbox(
      { ...this.opts.inheritedEnv, [SANDBOX_ENV]: this.opts.sandbox ?? "auto" },
      this.log,
    ).then((d) => {
      this.sandbox = d;
      if (d.kind === "process") this.log.warn({ sandbox: d.kind }, sandboxLine(d));
      else this.log.info({ sandbox: d.kind }, sandboxLine(d));
      return d;
    });
    return this.decided;
  }

  async launch(refs: LaunchRef[]): Promise<Array<{ ref: JobRef; handle?: string; error?: StopClass }>> {
    let sandbox: SandboxDecision;
    try {
      sandbox = await this.decideSandbox();
    } catch (err) {
      this.decided = undefined;
      const reason = `cannot decide where harnesses run: ${(err as Error).message}`;
      return refs.map(({ natsCredential: _, ...ref }) => ({
        ref,
        error: { kind: "retryable", reason, neverStarted: true },
      }));
    }
    return refs.map((ref) => this.launchOne(ref, sandbox));
  }

  private launchOne(
    launch: LaunchRef,
    sandbox: SandboxDecision,
  ): { ref: JobRef; handle?: string; error?: StopClass } {
    // The credential goes to the task's stdin and nowhere else: not its environment (which its harness, running
    // unsandboxed as the same user, could read from /proc), not a file, not a log line.
    const { natsCredential, ...ref } = launch;
    const [cmd, ...args] = this.opts.command ?? [...cliCommand(), "task"];
    const env: NodeJS.ProcessEnv = {
      ...taskEnvironment(this.opts.inheritedEnv ?? {}),
      ...this.opts.env,
      ...(natsCredential ? { [TASK_CREDS_ENV]: TASK_CREDS_STDIN } : {}),
      [JobRefEnv.run]: ref.runName,
      [JobRefEnv.cell]: ref.cellId,
      [JobRefEnv.attempt]: String(ref.attempt),
      [JobRefEnv.pool]: ref.pool,
      [SANDBOX_ENV]: sandbox.kind,
    };
    let child: ChildProcess;
    try {
      child = spawn(cmd ?? process.execPath, args, {
        cwd: this.opts.cwd ?? REPO,
        env,
        stdio: [natsCredential ? "pipe" : "ignore", "pipe", "pipe"],
      });
      if (natsCredential && child.stdin) {
        child.stdin.on("error", () => {}); // a task that died at once: its exit says why
        child.stdin.end(natsCredential.creds);
      }
    } catch (err) {
      return {
        ref,
        error: { kind: "fatal", reason: `cannot start task: ${String(err)}`, neverStarted: true },
      };
    }
    // host and pid in the handle: another replica on this host can tell whether the process still runs.
    const handle = `local:${hostname()}:${child.pid ?? 0}:${process.pid}-${++this.seq}`;
    const task: LocalTask = {
      ref,
      child,
      phase: "running",
      stdout: "",
      stderr: "",
      harnessGroups: new Set(),
      stderrCarry: "",
    };
    this.tasks.set(handle, task);
    child.stdout?.on("data", (d: Buffer) => {
      task.stdout = append(task.stdout, d);
    });
    child.stderr?.on("data", (d: Buffer) => {
      task.stderr = append(task.stderr, d);
      const text = task.stderrCarry + d.toString("utf8");
      for (const g of harnessGroupsIn(text)) task.harnessGroups.add(g);
      task.stderrCarry = text.slice(-(HARNESS_GROUP_LINE.length + 12));
    });
    child.once("error", (err: NodeJS.ErrnoException) => {
      // ENOENT / EACCES: the process never ran; nothing about the model.
      task.phase = "stopped";
      task.stop = {
        kind: "fatal",
        reason: `cannot start task: ${err.code ?? err.message}`,
        neverStarted: true,
      };
    });
    child.once("exit", (code, sig) => {
      if (task.killTimer) clearTimeout(task.killTimer);
      task.phase = "stopped";
      // The task is evalfleet's own process (the harness runs in a group of its own under it): killed by a signal
      // nobody here sent (the OOM killer, an operator, the host going down), the attempt never got to finish — an
      // infrastructure stop to retry, like a spot interruption, never the model's failure.
      if (sig !== null && !task.stopRequested)
        task.stop ??= { kind: "retryable", reason: `task process killed by ${sig}`, neverStarted: false };
      task.stop ??= { kind: "exited", exitCode: code ?? 128 + signalNumber(sig) };
      // Whatever way the task ended, no harness container of its attempt outlives it.
      void this.removeContainers(task.ref);
      // A task that ended by a signal could not stop its harness, which runs in a group of its own: stop it here,
      // once stderr is read to the end (the announcement may still be in the pipe).
      if (sig !== null) {
        let done = false;
        const reap = () => {
          if (done) return;
          done = true;
          this.killHarnesses(task);
        };
        child.once("close", reap);
        setTimeout(reap, 1_000).unref();
      }
    });
    this.log.debug({ ref, pid: child.pid, handle }, "local task started");
    return { ref, handle };
  }

  async observe(handles: string[]): Promise<TaskState[]> {
    return observeTracked(this.tasks, handles);
  }

  /** The task's captured output (for a result the dispatcher publishes on its behalf); forgets the task. */
  output(handle: string): { stdout: string; stderr: string } | undefined {
    const t = this.tasks.get(handle);
    if (!t) return undefined;
    if (t.phase === "stopped") this.tasks.delete(handle);
    return { stdout: t.stdout, stderr: t.stderr };
  }

  /**
   * A live task process on this host whose job reference is `ref`, read from its environment: the topmost one (the
   * git processes a task runs inherit its environment too).
   */
  async find(ref: JobRef): Promise<string | undefined> {
    const want = [
      `${JobRefEnv.run}=${ref.runName}`,
      `${JobRefEnv.cell}=${ref.cellId}`,
      `${JobRefEnv.attempt}=${ref.attempt}`,
    ];
    const matches = new Map<number, number>();
    for (const d of await readdir("/proc").catch(() => [] as string[])) {
      if (!/^\d+$/.test(d) || Number(d) === process.pid) continue;
      const env = await readFile(`/proc/${d}/environ`, "utf8").catch(() => "");
      if (!env.includes(want[2]!)) continue;
      const vars = new Set(env.split("\0"));
      if (!want.every((w) => vars.has(w)) || !localTaskAlive(`local:${hostname()}:${d}`)) continue;
      const stat = await readFile(`/proc/${d}/stat`, "utf8").catch(() => "");
      matches.set(Number(d), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    }
    for (const [pid, ppid] of matches) if (!matches.has(ppid)) return `local:${hostname()}:${pid}:found`;
    return undefined;
  }

  async stop(handles: string[], reason: string): Promise<void> {
    for (const h of handles) {
      const t = this.tasks.get(h);
      if (!t || t.phase === "stopped") continue;
      this.log.info({ handle: h, reason }, "stopping local task");
      t.stopRequested = true;
      t.child.kill("SIGTERM");
      t.killTimer = setTimeout(() => t.child.kill("SIGKILL"), this.opts.stopGraceMs ?? 10_000);
      t.killTimer.unref();
    }
  }

  private async removeContainers(ref: JobRef): Promise<void> {
    const rt = this.sandbox?.runtime;
    if (!rt) return;
    const label = attemptLabel({ run: ref.runName, cell: ref.cellId, attempt: ref.attempt });
    try {
      const gone = await rt.removeAll({ [ATTEMPT_LABEL]: label });
      if (gone.length > 0) this.log.warn({ ref, containers: gone }, "removed harness containers a task left");
    } catch (err) {
      this.log.warn({ ref, err }, "could not remove the harness containers of a finished task");
    }
  }

  private killHarnesses(task: LocalTask): void {
    for (const g of task.harnessGroups) {
      try {
        process.kill(-g, "SIGKILL");
        this.log.warn({ ref: task.ref, group: g }, "killed the harness a dead task left running");
      } catch {
        // the group is gone already (the task stopped it before it died)
      }
    }
    task.harnessGroups.clear();
  }

  async close(): Promise<void> {
    const live = [...this.tasks.values()].filter((t) => t.phase !== "stopped");
    await Promise.all(
      live.map(
        (t) =>
          new Promise<void>((resolve) => {
            t.child.once("exit", () => resolve());
            t.stopRequested = true;
            t.child.kill("SIGTERM");
            setTimeout(() => t.child.kill("SIGKILL"), 2_000).unref();
          }),
      ),
    );
  }
}

/** The task reads its NATS credential from the file NATS_CREDS names: its stdin, where the backend writes it. */
const TASK_CREDS_ENV = NATS_USER_ENV.creds;
const TASK_CREDS_STDIN = CREDS_ON_STDIN;

/** The dispatcher's own variables a task never gets: any NATS credential, the judge's key, the run key. */
const NOT_FOR_TASKS = new Set([
  "EVALFLEET_JUDGE_KEY",
  "EVALFLEET_RUN_KEY",
  "NATS_CREDS",
  "NATS_NKEY",
  "NATS_NKEY_SEED",
  "NATS_JWT",
  "NATS_USER",
  "NATS_PASSWORD",
  "NATS_TOKEN",
  "NATS_ACCOUNT",
  "NATS_SIGNING_KEY",
  "NATS_TLS_CERT",
  "NATS_TLS_KEY",
]);

/**
 * What of the dispatcher's environment a task gets: where NATS is (never the dispatcher's NATS credential: the
 * task gets its own attempt's user on stdin), the container runtime, its folders — never the database URL,
 * provider keys, the judge's key, a run key or cloud credentials, which a task has no use for (and a harness
 * running unsandboxed beside it could read from its /proc environ).
 */
export function taskEnvironment(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const keep = (k: string) =>
    !NOT_FOR_TASKS.has(k) &&
    (["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "XDG_RUNTIME_DIR", "NODE_OPTIONS"].includes(k) ||
      /^(NATS|DOCKER)_/.test(k) ||
      k.startsWith("EVALFLEET_"));
  return Object.fromEntries(Object.entries(env).filter(([k, v]) => v !== undefined && keep(k)));
}

function signalNumber(sig: NodeJS.Signals | null): number {
  const n: Partial<Record<NodeJS.Signals, number>> = { SIGHUP: 1, SIGINT: 2, SIGKILL: 9, SIGTERM: 15 };
  return sig ? (n[sig] ?? 0) : 0;
}

/**
 * For a handle this process did not launch (its dispatcher died): true while the task's process still runs on this
 * host, false when it is gone, undefined when the handle is not a local one or is from another host.
 */
export function localTaskAlive(handle: string): boolean | undefined {
  const [kind, host, pid] = handle.split(":");
  if (kind !== "local" || host !== hostname() || !pid || Number(pid) <= 0) return undefined;
  try {
    // A zombie (Z) or dead (X) process is not running.
    return !/^\d+ \(.*\) [ZX]/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}
