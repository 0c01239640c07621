/**
 * One harness session: a shim of its own (own trace id, budget and turn cap), the harness under supervision, and
 * what came back. A swe or open_ended attempt is one session; a multi_phase attempt is one per phase, in order, in
 * the same workdir.
 */
import path from "node:path";
import { buildPrompt } from "../harnesses/common.js";
import type { HarnessAdapter, HarnessReport } from "../harnesses/types.js";
import type { Logger } from "../lib/log.js";
import type { Plane } from "../plane/connect.js";
import type { ModelSpec, TaskSpec } from "../protocol/config.js";
import type { CellWork, LedgerCall } from "../protocol/messages.js";
import type { Pacer } from "../protocol/pacer.js";
import { HARNESS_GROUP_LINE } from "../protocol/task.js";
import type { PriceTable } from "../providers/pricing.js";
import { type RetryPolicy, type ShimTotals, startShim } from "../shim/index.js";
import type { TaskJob } from "./job.js";
import type { TaskRef } from "./ref.js";
import { modelId } from "./result.js";
import type { HarnessSandbox } from "./sandbox.js";
import type { HarnessExit, StopReason } from "./supervise.js";
import { type AttemptDirs, readyForSession } from "./workdir.js";

/** What the harness sends as its key: never a real credential, the shim swaps in the run's key. */
export const HARNESS_DUMMY_KEY = "evalfleet-shim-holds-the-real-key";

export interface SessionSpec {
  /** the phase name; null for a single-session attempt */
  phase: string | null;
  role: "implementation" | "review";
  model: ModelSpec;
  traceId: string;
  prompt: string;
}

const REVIEW_PROMPT =
  "Review the uncommitted changes in this repository (see `git diff`): they are meant to resolve the issue " +
  "below. Fix anything wrong or missing in them and change nothing else.";

/** The sessions an attempt runs: one, or one per phase with `{traceId}__phase-{name}` and the phase's model. */
export function planSessions(job: TaskJob): SessionSpec[] {
  const { task, work, model, config } = job;
  const base = buildPrompt(task);
  if (task.track !== "multi_phase" || !task.phases?.length)
    return [{ phase: null, role: "implementation", model, traceId: work.traceId, prompt: base }];
  const reviewModel = config.models.find((m) => m.name === work.reviewModel) ?? model;
  return task.phases.map((p) => ({
    phase: p.name,
    role: p.model_role,
    model: p.model_role === "review" ? reviewModel : model,
    traceId: `${work.traceId}__phase-${p.name}`,
    prompt:
      p.model_role === "review"
        ? `${p.prompt ?? REVIEW_PROMPT}\n\n${base}`
        : p.prompt
          ? `${p.prompt}\n\n${base}`
          : base,
  }));
}

export interface SessionOutcome {
  spec: SessionSpec;
  exit: HarnessExit | null;
  report: HarnessReport | null;
  totals: ShimTotals | null;
  /** the harness's own trajectory files */
  files: string[];
  error: string | null;
  durationMs: number;
}

/** What every session of an attempt shares. */
export interface SessionContext {
  plane: Plane;
  ref: TaskRef;
  work: CellWork;
  task: TaskSpec;
  settings: Record<string, unknown>;
  timeoutSeconds: number;
  dirs: AttemptDirs;
  adapter: HarnessAdapter;
  upstream: string;
  runKey: string;
  prices: PriceTable;
  aliases: Record<string, string>;
  env: NodeJS.ProcessEnv;
  log: Logger;
  /** where each session's harness runs */
  sandbox: HarnessSandbox;
  pacer?: Pacer;
  retry?: Partial<RetryPolicy>;
  graceMs?: number;
  /** every ledger row of the attempt, all sessions */
  calls: LedgerCall[];
  /** set by runSession while a harness runs: how the attempt's signals and SIGTERM reach it */
  stopCurrent?: (reason: StopReason) => void;
  /** a cancel arrived: no session starts any more */
  cancelled: () => boolean;
}

export async function runSession(
  ctx: SessionContext,
  spec: SessionSpec,
  index: number,
  caps: { budgetNanoUsd: bigint | null; maxTurns: number | null; timeoutMs: number },
): Promise<SessionOutcome> {
  const started = Date.now();
  const out: SessionOutcome = {
    spec,
    exit: null,
    report: null,
    totals: null,
    files: [],
    error: null,
    durationMs: 0,
  };
  const listen = await ctx.sandbox.shimListen(index);
  const shim = await startShim({
    ...listen,
    upstream: ctx.upstream,
    run: ctx.ref.run,
    cell: ctx.ref.cell,
    attempt: ctx.ref.attempt,
    providerKey: ctx.runKey,
    budgetNanoUsd: caps.budgetNanoUsd,
    maxTurns: caps.maxTurns,
    nc: ctx.plane.nc,
    pool: ctx.work.pool,
    traceId: spec.traceId,
    costMode: spec.model.cost_mode,
    prices: ctx.prices,
    aliases: ctx.aliases,
    logger: ctx.log,
    onLedgerRow: (row) => ctx.calls.push(row),
    ...(ctx.pacer ? { pacer: ctx.pacer } : {}),
    ...(ctx.retry ? { retry: ctx.retry } : {}),
  });
  let unsubscribe: (() => void) | undefined;
  try {
    await readyForSession(ctx.dirs, index);
    const launch = await ctx.adapter.prepare({
      workdir: ctx.dirs.repo,
      homeDir: ctx.dirs.home,
      outDir: ctx.dirs.out,
      shimUrl: ctx.sandbox.shimUrl(shim),
      harnessKey: HARNESS_DUMMY_KEY,
      model: modelId(spec.model),
      provider: spec.model.provider,
      maxTurns: caps.maxTurns,
      prompt: spec.prompt,
      settings: ctx.settings,
      timeoutSeconds: ctx.timeoutSeconds,
      ...(ctx.sandbox.runtime ? { runtime: ctx.sandbox.runtime } : {}),
    });
    const stdoutFile = launch.stdoutIsTrajectory
      ? path.join(ctx.dirs.taskDir, `stdout-${index}.jsonl`)
      : undefined;
    out.files = [...(stdoutFile ? [stdoutFile] : []), ...(launch.trajectoryFiles ?? [])];
    if (ctx.cancelled()) throw new Error("cancelled before the harness started");
    // A container of its own (local), the other container of an ECS task, or a plain process (unsandboxed).
    const sup = ctx.sandbox.supervise(index, {
      command: launch.command,
      args: launch.args,
      cwd: ctx.dirs.repo,
      // Only what the harness needs: none of the task's own secrets (run key, NATS credentials) are inherited.
      env: {
        PATH: ctx.env.PATH ?? "/usr/local/bin:/usr/bin:/bin",
        LANG: ctx.env.LANG ?? "C.UTF-8",
        TMPDIR: ctx.dirs.home,
        TERM: "dumb",
        NO_COLOR: "1",
        ...launch.env,
      },
      timeoutMs: Math.max(1, caps.timeoutMs),
      ...(ctx.graceMs !== undefined ? { graceMs: ctx.graceMs } : {}),
      ...(stdoutFile ? { stdoutFile } : {}),
    });
    // For the launcher: if this process is SIGKILLed, the harness's group is left for it to kill.
    if (sup.pid !== undefined) process.stderr.write(`${HARNESS_GROUP_LINE}${sup.pid}\n`);
    ctx.stopCurrent = sup.stop;
    unsubscribe = shim.onCapReached(() => sup.stop("cap"));
    try {
      out.exit = await sup.done;
    } finally {
      // Never leave a harness behind, whatever threw (a no-op once it has exited).
      sup.stop("cancel");
      ctx.stopCurrent = undefined;
    }
    out.report = ctx.adapter.report ? ctx.adapter.report(out.exit.stdout) : null;
  } catch (err) {
    out.error = err instanceof Error ? err.message : String(err);
  } finally {
    unsubscribe?.();
    await shim.close().catch(() => {});
    out.totals = shim.totals();
    out.durationMs = Date.now() - started;
  }
  return out;
}

/** Did the session end in a way that lets the next phase start (exited 0 by itself, no cap)? */
export function sessionClean(o: SessionOutcome): boolean {
  return (
    o.error === null &&
    o.exit !== null &&
    o.exit.stoppedFor === null &&
    o.exit.spawnError === null &&
    o.exit.exitCode === 0 &&
    !o.totals?.capReason &&
    o.report?.status == null
  );
}
