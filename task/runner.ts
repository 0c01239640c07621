/**
 * The harness container's side of a two-container attempt (the ECS harness task: deploy/lib/compute.ts), and the
 * task's side of handing it work. On Fargate there is no container API to start a harness with: both containers
 * start with the task, share one volume and the task's network namespace, and nothing else. The task container
 * (holding the attempt's credentials) prepares the workdir, runs the shim on 127.0.0.1, and leaves the harness its
 * command as a file; the harness container (another uid, no secrets) runs `evalfleet harness-runner DIR`, which
 * runs each command it is given in its own process group and reports how it ended. Files in `DIR/control`:
 *
 *   <n>.launch.json   task → runner: command, args, cwd, env, timeout of session n (written by rename: whole)
 *   <n>.stdout/.stderr runner: the harness's output as it comes
 *   <n>.exit.json     runner → task: exit code / signal / spawn error
 *   <n>.kill          task → runner: "TERM" or "KILL" for session n's process group
 *   done              task → runner: no more sessions, exit
 *
 * What the harness writes here is its own business and read as untrusted (parsed, bounded): a forged exit file
 * only misreports its own exit. The runner refuses a launch whose cwd is outside DIR.
 */
import { spawn } from "node:child_process";
import { createWriteStream, existsSync } from "node:fs";
import { mkdir, open, readFile, rename, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { z } from "zod";
import type { HarnessExit, StopReason, Supervised, SuperviseOptions } from "./supervise.js";

const LaunchSchema = z.object({
  command: z.string().min(1),
  args: z.array(z.string()),
  cwd: z.string().min(1),
  env: z.record(z.string(), z.string()),
  timeoutMs: z.number().int().positive(),
  graceMs: z.number().int().nonnegative(),
});
type Launch = z.infer<typeof LaunchSchema>;

const ExitSchema = z.object({
  exitCode: z.number().int().nullable(),
  signal: z.string().nullable(),
  spawnError: z.string().nullable(),
});

const POLL_MS = 100;
/** A runner that has not taken a command by then is not there (its container failed to start). */
const PICKUP_MS = 120_000;
const KEEP_BYTES = 512 * 1024;

export const controlDir = (dir: string) => path.join(dir, "control");

async function writeWhole(file: string, text: string, mode = 0o640): Promise<void> {
  const tmp = `${file}.tmp-${process.pid}`;
  await writeFile(tmp, text, { mode });
  await rename(tmp, file);
}

/** The last KEEP_BYTES of a file that may still be growing (the harness's output). */
async function tail(file: string): Promise<string> {
  try {
    const { size } = await stat(file);
    const fh = await open(file, "r");
    try {
      const len = Math.min(size, KEEP_BYTES);
      const buf = Buffer.alloc(len);
      await fh.read(buf, 0, len, size - len);
      return buf.toString("utf8");
    } finally {
      await fh.close();
    }
  } catch {
    return "";
  }
}

/**
 * The task's side: hand session `index` to the runner and follow it, with the same contract as superviseHarness
 * (timeout, stop by reason with a grace period, output tails).
 */
export function superviseViaRunner(dir: string, index: number, opts: SuperviseOptions): Supervised {
  const ctl = controlDir(dir);
  const started = Date.now();
  const grace = opts.graceMs ?? 3_000;
  let stoppedFor: StopReason | null = null;
  let finished = false;
  const kill = (sig: "TERM" | "KILL") => writeWhole(path.join(ctl, `${index}.kill`), sig).catch(() => {});
  const stop = (reason: StopReason) => {
    if (stoppedFor !== null || finished) return;
    stoppedFor = reason;
    void kill("TERM");
    setTimeout(() => void (finished ? undefined : kill("KILL")), grace).unref();
  };
  const launch: Launch = {
    command: opts.command,
    args: opts.args,
    cwd: opts.cwd,
    env: opts.env,
    timeoutMs: opts.timeoutMs,
    graceMs: grace,
  };
  const done = (async (): Promise<HarnessExit> => {
    const result = (exit: z.infer<typeof ExitSchema>, out: string, err: string): HarnessExit => ({
      exitCode: exit.exitCode,
      signal: exit.signal as NodeJS.Signals | null,
      stoppedFor,
      spawnError: exit.spawnError,
      stdout: out,
      stderr: err,
      durationMs: Date.now() - started,
    });
    try {
      await mkdir(ctl, { recursive: true, mode: 0o770 });
      await writeWhole(path.join(ctl, `${index}.launch.json`), JSON.stringify(launch));
    } catch (e) {
      finished = true;
      return result(
        { exitCode: null, signal: null, spawnError: `cannot hand the harness its command: ${String(e)}` },
        "",
        "",
      );
    }
    const timer = setTimeout(() => stop("timeout"), opts.timeoutMs);
    const exitFile = path.join(ctl, `${index}.exit.json`);
    const stdoutFile = path.join(ctl, `${index}.stdout`);
    try {
      for (;;) {
        if (existsSync(exitFile)) {
          const parsed = ExitSchema.safeParse(
            JSON.parse((await readFile(exitFile, "utf8")).slice(0, 4096) || "null"),
          );
          const exit = parsed.success
            ? parsed.data
            : {
                exitCode: null,
                signal: null,
                spawnError: "the harness runner wrote an exit record that does not parse",
              };
          const out = await tail(stdoutFile);
          if (opts.stdoutFile)
            await writeFile(opts.stdoutFile, await readFile(stdoutFile).catch(() => Buffer.alloc(0)));
          return result(exit, out, await tail(path.join(ctl, `${index}.stderr`)));
        }
        if (!existsSync(stdoutFile) && Date.now() - started > PICKUP_MS)
          return result(
            {
              exitCode: null,
              signal: null,
              spawnError: `no harness runner took the command within ${PICKUP_MS / 1000}s`,
            },
            "",
            "",
          );
        await sleep(POLL_MS);
      }
    } finally {
      clearTimeout(timer);
      finished = true;
    }
  })();
  return { pid: undefined, stop, done };
}

/** Tell the runner there is nothing more: it exits, and so does the harness container. */
export async function releaseRunner(dir: string): Promise<void> {
  await mkdir(controlDir(dir), { recursive: true, mode: 0o770 });
  await writeWhole(path.join(controlDir(dir), "done"), "");
}

/** The harness container's side: run every session the task hands over, until `done`. Returns the exit code. */
export async function runHarnessRunner(
  dir: string,
  opts: { log?: (line: string) => void; pollMs?: number; idleExitMs?: number } = {},
): Promise<number> {
  const ctl = controlDir(dir);
  const root = path.resolve(dir);
  const log = opts.log ?? (() => {});
  const idleStart = Date.now();
  for (let index = 0; ; ) {
    const launchFile = path.join(ctl, `${index}.launch.json`);
    if (!existsSync(launchFile)) {
      if (existsSync(path.join(ctl, "done"))) return 0;
      // A task that died before handing anything over must not leave this container up forever.
      if (opts.idleExitMs !== undefined && Date.now() - idleStart > opts.idleExitMs) return 1;
      await sleep(opts.pollMs ?? POLL_MS);
      continue;
    }
    let raw: unknown = null;
    try {
      raw = JSON.parse(await readFile(launchFile, "utf8"));
    } catch {
      // refused below
    }
    const parsed = LaunchSchema.safeParse(raw);
    const exitFile = path.join(ctl, `${index}.exit.json`);
    if (!parsed.success || !path.resolve(parsed.data.cwd).startsWith(`${root}${path.sep}`)) {
      await writeWhole(
        exitFile,
        JSON.stringify({
          exitCode: null,
          signal: null,
          spawnError: "refused: a launch must be well-formed and run inside the attempt",
        }),
      );
      index++;
      continue;
    }
    log(`session ${index}: ${parsed.data.command}`);
    const exit = await runOne(ctl, index, parsed.data, opts.pollMs ?? POLL_MS);
    await writeWhole(exitFile, JSON.stringify(exit));
    index++;
  }
}

async function runOne(
  ctl: string,
  index: number,
  l: Launch,
  pollMs: number,
): Promise<z.infer<typeof ExitSchema>> {
  const out = createWriteStream(path.join(ctl, `${index}.stdout`), { mode: 0o640 });
  const err = createWriteStream(path.join(ctl, `${index}.stderr`), { mode: 0o640 });
  const child = spawn(l.command, l.args, {
    cwd: l.cwd,
    env: l.env,
    detached: true,
    stdio: ["ignore", "pipe", "pipe"],
  });
  child.stdout?.pipe(out);
  child.stderr?.pipe(err);
  const group = (sig: NodeJS.Signals) => {
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, sig);
    } catch {
      // gone already
    }
  };
  // The runner keeps the timeout too: a task container that died cannot leave the harness running past it.
  const deadline = setTimeout(() => {
    group("SIGTERM");
    setTimeout(() => group("SIGKILL"), l.graceMs).unref();
  }, l.timeoutMs + l.graceMs);
  const watcher = setInterval(() => {
    void readFile(path.join(ctl, `${index}.kill`), "utf8")
      .then((sig) => group(sig.trim() === "KILL" ? "SIGKILL" : "SIGTERM"))
      .catch(() => {});
  }, pollMs);
  const exit = await new Promise<z.infer<typeof ExitSchema>>((resolve) => {
    child.once("error", (e) => resolve({ exitCode: null, signal: null, spawnError: e.message }));
    child.once("exit", (code, sig) => resolve({ exitCode: code, signal: sig, spawnError: null }));
  });
  clearTimeout(deadline);
  clearInterval(watcher);
  // Whatever the harness left in its group goes with it.
  group("SIGKILL");
  await Promise.all([new Promise((r) => out.end(r)), new Promise((r) => err.end(r))]);
  return exit;
}
