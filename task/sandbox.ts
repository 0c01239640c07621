/**
 * Where a harness session runs. The harness is hostile: it runs model-written code. Three shapes:
 *
 * - `container` (the local default wherever a Docker API answers): each session in a container of its own from the
 *   harness image (images/harness.ts), as uid 10002, `--network none`, capabilities dropped, no new privileges, a
 *   read-only root with a small /tmp, memory / CPU / pids limits from the run config, and one writable host path —
 *   the attempt's harness folder (its checkout, HOME and trajectory folder). Its only way out is the shim: the
 *   shim listens on a unix socket in a folder of the task's, bind-mounted read-only at /run/evalfleet-shim, and the
 *   container's init serves it at 127.0.0.1:<SHIM_PORT> inside. Credentials (the attempt's gateway key, its NATS
 *   credential) stay in the task process: not in the container's environment, files or process list (its own
 *   pid namespace). A timeout, cap, cancel, or the task's own death removes the container, and with it everything
 *   the harness started (the pid namespace ends with its first process).
 * - `runner` (ECS): the harness container of a two-container Fargate task runs what the task hands it over the
 *   shared volume (task/runner.ts).
 * - `process`: a plain child process of the task, for machines without a container runtime. UNSANDBOXED: it runs
 *   as the task's user with the task's filesystem, network and process list in reach; said so in `start`, `up`
 *   and the report.
 */
import { chmod, lchown, lstat, mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import {
  type Container,
  ContainerError,
  type ContainerRuntime,
  type ContainerSpec,
} from "../containers/index.js";
import type { HarnessRuntime } from "../harnesses/types.js";
import { HARNESS_UID, SANDBOX } from "../images/harness.js";
import type { Logger } from "../lib/log.js";
import type { RunConfig } from "../protocol/config.js";
import type { SandboxKind } from "../protocol/messages.js";
import { attemptToken } from "../protocol/names.js";
import type { ShimHandle } from "../shim/index.js";
import type { TaskRef } from "./ref.js";
import { superviseViaRunner } from "./runner.js";
import {
  type HarnessExit,
  harnessExit,
  type StopReason,
  type Supervised,
  type SuperviseOptions,
  superviseHarness,
  Tail,
} from "./supervise.js";
import type { AttemptDirs } from "./workdir.js";

/** Every harness container carries this label, valued `<run>/<cell>/<attempt>`: what its backend removes. */
export const ATTEMPT_LABEL = "io.evalfleet.attempt";
export const ROLE_LABEL = "io.evalfleet.role";
/** The port the harness reaches its shim at, inside its container (its loopback is its own). */
export const SHIM_PORT = 4141;
const SHIM_MOUNT = "/run/evalfleet-shim";

export type { SuperviseOptions };

export interface HarnessSandbox {
  readonly kind: SandboxKind;
  /** where the harness's programs are as it sees them (absent: this machine's) */
  readonly runtime?: HarnessRuntime;
  /** where session `index`'s shim listens */
  shimListen(index: number): Promise<{ host: string } | { socketPath: string }>;
  /** the base URL the harness reaches that shim at */
  shimUrl(shim: ShimHandle): string;
  supervise(index: number, opts: SuperviseOptions): Supervised;
  /** remove whatever the sandbox still has (containers of this attempt) */
  close(): Promise<void>;
}

/** `<run>/<cell>/<attempt>`: the value of a harness container's attempt label. */
export function attemptLabel(ref: TaskRef): string {
  return `${ref.run}/${ref.cell}/${attemptToken(ref.attempt)}`;
}

/** A child process of the task: unsandboxed. */
export class ProcessSandbox implements HarnessSandbox {
  readonly kind = "process" as const;
  async shimListen(): Promise<{ host: string }> {
    return { host: "127.0.0.1" };
  }
  shimUrl(shim: ShimHandle): string {
    return shim.url;
  }
  supervise(_index: number, opts: SuperviseOptions): Supervised {
    return superviseHarness(opts);
  }
  async close(): Promise<void> {}
}

/** The harness container of an ECS task, handed each session over the shared volume. */
export class RunnerSandbox implements HarnessSandbox {
  readonly kind = "container" as const;
  constructor(private readonly dir: string) {}
  async shimListen(): Promise<{ host: string }> {
    return { host: "127.0.0.1" };
  }
  shimUrl(shim: ShimHandle): string {
    return shim.url;
  }
  supervise(index: number, opts: SuperviseOptions): Supervised {
    return superviseViaRunner(this.dir, index, opts);
  }
  async close(): Promise<void> {}
}

export interface ContainerSandboxOptions {
  runtime: ContainerRuntime;
  /** the harness image (instance + harness layer) */
  image: string;
  ref: TaskRef;
  dirs: AttemptDirs;
  limits: RunConfig["sandbox"];
  log: Logger;
  /** the checkout's path inside the container; default the same path as on the host */
  repoInside?: string;
}

/** Give the harness's user everything under `dir` (links themselves, never what they point at). */
async function handOver(dir: string, uid: number): Promise<void> {
  const st = await lstat(dir);
  if (st.uid !== uid) await lchown(dir, uid, uid);
  if (!st.isDirectory()) return;
  for (const e of await readdir(dir)) await handOver(path.join(dir, e), uid);
}

/** `docker kill` exit codes and signal numbers back to names, as a process exit reports them. */
function signalName(code: number | null): NodeJS.Signals | null {
  if (code === null || code <= 128) return null;
  const names: Record<number, NodeJS.Signals> = { 1: "SIGHUP", 2: "SIGINT", 9: "SIGKILL", 15: "SIGTERM" };
  return names[code - 128] ?? null;
}

/** One container per session, from the harness image. */
export class ContainerSandbox implements HarnessSandbox {
  readonly kind = "container" as const;
  readonly runtime: HarnessRuntime = {
    node: SANDBOX.node,
    app: SANDBOX.app,
    referenceAgent: [SANDBOX.node, SANDBOX.referenceAgent],
  };
  private readonly live = new Set<Container>();
  /** each session's shim socket folder */
  private readonly sockets = new Map<number, string>();

  constructor(private readonly o: ContainerSandboxOptions) {}

  /** A fresh sandbox for an attempt: containers an earlier run of the same attempt left are removed first. */
  static async open(o: ContainerSandboxOptions): Promise<ContainerSandbox> {
    await o.runtime.removeAll({ [ATTEMPT_LABEL]: attemptLabel(o.ref) });
    return new ContainerSandbox(o);
  }

  private socketDir(index: number): string {
    const dir = this.sockets.get(index);
    if (!dir) throw new Error(`session ${index}'s shim is not listening`);
    return dir;
  }

  /**
   * The session's shim socket, in a short folder of its own: a unix socket path is at most 107 bytes, and an
   * attempt's folder (named after run and cell) can be longer than that — the socket would be created elsewhere.
   */
  async shimListen(index: number): Promise<{ socketPath: string }> {
    const dir = await mkdtemp(path.join(tmpdir(), "efshim-"));
    await chmod(dir, 0o755);
    this.sockets.set(index, dir);
    return { socketPath: path.join(dir, "shim.sock") };
  }

  shimUrl(): string {
    return `http://127.0.0.1:${SHIM_PORT}`;
  }

  private spec(index: number, opts: SuperviseOptions): ContainerSpec {
    const { dirs, ref, limits } = this.o;
    const repoInside = this.o.repoInside ?? dirs.repo;
    const cwd = opts.cwd === dirs.repo ? repoInside : opts.cwd;
    return {
      image: this.o.image,
      entrypoint: [SANDBOX.node, SANDBOX.init],
      command: [`${SHIM_MOUNT}/shim.sock`, String(SHIM_PORT), "--", opts.command, ...opts.args],
      user: `${HARNESS_UID}:${HARNESS_UID}`,
      env: {
        ...opts.env,
        PATH: `${path.posix.dirname(SANDBOX.node)}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
      },
      workdir: cwd,
      mounts: [
        { source: dirs.harnessRoot, target: dirs.harnessRoot },
        ...(repoInside !== dirs.repo ? [{ source: dirs.repo, target: repoInside }] : []),
        { source: this.socketDir(index), target: SHIM_MOUNT, readOnly: true },
      ],
      tmpfs: { "/tmp": `rw,nosuid,nodev,size=${limits.tmp_mb}m,mode=1777` },
      readOnlyRoot: true,
      network: "none",
      limits: { memoryBytes: limits.memory_mb * 1024 * 1024, cpus: limits.cpus, pids: limits.pids },
      capDrop: ["ALL"],
      noNewPrivileges: true,
      init: true,
      logDriver: "none",
      labels: {
        [ATTEMPT_LABEL]: attemptLabel(ref),
        [ROLE_LABEL]: "harness",
        "io.evalfleet.session": String(index),
      },
    };
  }

  supervise(index: number, opts: SuperviseOptions): Supervised {
    const started = Date.now();
    const grace = opts.graceMs ?? 3_000;
    const out = new Tail();
    const err = new Tail();
    let stoppedFor: StopReason | null = null;
    let container: Container | undefined;
    let finished = false;
    let killTimer: NodeJS.Timeout | undefined;
    const kill = (sig: string) => void container?.kill(sig).catch(() => {});
    const stop = (reason: StopReason) => {
      if (stoppedFor !== null || finished) return;
      stoppedFor = reason;
      kill("SIGTERM");
      killTimer = setTimeout(() => kill("SIGKILL"), grace);
      killTimer.unref();
    };
    const done = (async (): Promise<HarnessExit> => {
      let exitCode: number | null = null;
      let spawnError: string | null = null;
      let timer: NodeJS.Timeout | undefined;
      const tee = opts.stdoutFile ? (await import("node:fs")).createWriteStream(opts.stdoutFile) : undefined;
      try {
        await handOver(this.o.dirs.harnessRoot, HARNESS_UID);
        container = await this.o.runtime.create(this.spec(index, opts));
        this.live.add(container);
        const attached = await container.attachOutput(
          (b) => {
            out.push(b);
            tee?.write(b);
          },
          (b) => err.push(b),
        );
        if (stoppedFor === null) {
          await container.start();
          timer = setTimeout(() => stop("timeout"), Math.max(1, opts.timeoutMs));
          const waited = await container.wait();
          exitCode = waited.exitCode;
          // The streams close with the container; never wait on them for long.
          await Promise.race([attached.ended, new Promise((r) => setTimeout(r, 2_000).unref())]);
          if (waited.oomKilled)
            err.push(
              Buffer.from("\nevalfleet: the harness container reached its memory limit and was killed\n"),
            );
        }
        attached.detach();
      } catch (e) {
        spawnError =
          e instanceof ContainerError ? `harness container: ${e.message}` : `harness container: ${String(e)}`;
      } finally {
        finished = true;
        clearTimeout(timer);
        clearTimeout(killTimer);
        if (container) {
          await container
            .remove()
            .catch((e) => this.o.log.warn({ err: e }, "harness container removal failed"));
          this.live.delete(container);
        }
        if (tee) await new Promise((r) => tee.end(r));
      }
      const signal = signalName(exitCode);
      return harnessExit(
        { exitCode: signal ? null : exitCode, signal, stoppedFor, spawnError },
        out,
        err,
        started,
      );
    })();
    return { pid: undefined, stop, done };
  }

  async close(): Promise<void> {
    await Promise.all([...this.live].map((c) => c.remove().catch(() => {})));
    await this.o.runtime.removeAll({ [ATTEMPT_LABEL]: attemptLabel(this.o.ref) }).catch(() => {});
    await Promise.all([...this.sockets.values()].map((d) => rm(d, { recursive: true, force: true })));
    this.sockets.clear();
  }
}
