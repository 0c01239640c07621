/**
 * The chaos run's local-backend scenario: real `evalfleet task` processes, each with its real shim, running a
 * command-adapter harness (sh + curl) that makes metered calls through the shim, the gateway tier and the scripted
 * provider, then fixes the task. The provider holds each call for a moment, so a task can be SIGKILLed while one of
 * its calls is in flight: the harness names its task's pid in each call, and the provider's scenario hook kills it.
 */
import { cp, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { safeSlug } from "../../protocol/names.js";
import { JobRefEnv } from "../../protocol/task.js";
import type { ScriptedRequest } from "../../scripted-provider/index.js";
import { procEnv } from "./procs.js";

/** Copies of the sample calc task (a failing test and a known fix) under distinct ids. */
export async function writeLocalLibrary(root: string, lib: string, tasks: number): Promise<string[]> {
  await cp(join(root, "examples/tasks/repos/calc"), join(lib, "repos/calc"), { recursive: true });
  const spec = await readFile(join(root, "examples/tasks/sample-calc-add.yaml"), "utf8");
  const ids: string[] = [];
  for (let i = 0; i < tasks; i++) {
    const id = `chaos-calc-${i}`;
    await writeFile(join(lib, `${id}.yaml`), spec.replace(/^id: .*$/m, `id: ${id}`));
    ids.push(id);
  }
  return ids;
}

/**
 * The harness: `calls` model calls through the shim (curl retries what fails, as an SDK would: each retry is a new
 * call the shim meters), then the fix. $HOME is the attempt's own folder and $PPID its `evalfleet task` process:
 * both go into the prompt, so the provider can tell whose call it is.
 */
export function harnessCommand(calls: number): string {
  const body =
    '{"model":"\'"$EVALFLEET_MODEL"\'","max_tokens":256,"messages":[{"role":"user","content":"fix \'"$HOME"\' task \'"$PPID"\' (call \'"$i"\')"}]}';
  return [
    "set -e",
    `for i in $(seq 1 ${calls}); do`,
    `  curl -sS --fail --retry 6 --retry-delay 1 --retry-all-errors --max-time 60 -o /dev/null \\`,
    `    -H 'content-type: application/json' -H "x-api-key: $ANTHROPIC_API_KEY" -H 'anthropic-version: 2023-06-01' \\`,
    `    -d '${body}' "$ANTHROPIC_BASE_URL/v1/messages"`,
    "done",
    "sed -i '0,/a - b;/s//a + b;/' calc.js",
  ].join("\n");
}

/** The harness names its HOME (`<cell>/<attempt>/harness/home`: see attemptDirs) and its task's pid in each prompt. */
const CALL = /fix (\S+)\/(\d+)\/harness\/home task (\d+) \(call (\d+)\)/;

/** Whose call a provider request is: the attempt folder's cell slug and attempt, and the task's pid. */
export function localCallOf(
  body: unknown,
): { cellSlug: string; attempt: number; taskPid: number; call: number } | undefined {
  const m = CALL.exec(JSON.stringify(body));
  if (!m) return undefined;
  const cellSlug = m[1]!.split("/").at(-1) ?? "";
  return { cellSlug, attempt: Number(m[2]), taskPid: Number(m[3]), call: Number(m[4]) };
}

/** cell slug (as in workdir paths) → cell id. */
export function cellsBySlug(cells: readonly string[]): Map<string, string> {
  return new Map(cells.map((c) => [safeSlug(c), c]));
}

export interface TaskKill {
  atMs: number;
  pid: number;
  run: string;
  cellId: string;
  attempt: number;
  call: number;
}

/**
 * Kills one `evalfleet task` mid-call when armed: the next call the provider receives names its task's pid; that
 * process (checked to be one of ours, by its marker and job reference) gets SIGKILL while the provider still holds
 * the call.
 */
export class TaskKiller {
  private armed: ((k: TaskKill | Error) => void) | undefined;
  readonly kills: TaskKill[] = [];

  constructor(
    private readonly marker: { name: string; value: string },
    private readonly t0: number,
  ) {}

  /** Resolves with the kill, or rejects when no call came within `ms`. */
  arm(ms: number): Promise<TaskKill> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.armed = undefined;
        reject(new Error(`no task call reached the provider within ${ms} ms`));
      }, ms);
      this.armed = (k) => {
        clearTimeout(timer);
        if (k instanceof Error) reject(k);
        else resolve(k);
      };
    });
  }

  /** The provider's hook: called for every request it receives. */
  onCall(req: ScriptedRequest): void {
    const done = this.armed;
    if (!done) return;
    const who = localCallOf(req.body);
    if (!who) return;
    this.armed = undefined;
    void this.kill(who.taskPid, who.call).then(done, (err: unknown) =>
      done(err instanceof Error ? err : new Error(String(err))),
    );
  }

  private async kill(pid: number, call: number): Promise<TaskKill> {
    const env = await procEnv(pid);
    const cellId = env?.get(JobRefEnv.cell);
    if (!env || env.get(this.marker.name) !== this.marker.value || !cellId)
      throw new Error(`pid ${pid} is not one of this run's tasks`);
    process.kill(pid, "SIGKILL");
    const k: TaskKill = {
      atMs: Date.now() - this.t0,
      pid,
      run: env.get(JobRefEnv.run) ?? "",
      cellId,
      attempt: Number(env.get(JobRefEnv.attempt)),
      call,
    };
    this.kills.push(k);
    return k;
  }
}
