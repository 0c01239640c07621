/**
 * The harness task: one attempt of one cell, from a job reference to exactly one published AttemptResult. Whatever
 * happens — the harness finishes, crashes, hangs, or a cap ends the session — the patch so far, the trajectory and
 * the redacted output are stored and a result is published; only an unreachable NATS can stop that.
 */
import { chmod, rm } from "node:fs/promises";
import { harnessVersionProblem } from "../harnesses/common.js";
import { adapterFor } from "../harnesses/index.js";
import { type Logger, silentLogger } from "../lib/log.js";
import { retry } from "../lib/retry.js";
import { attemptChunkId, putOwnBlob } from "../plane/blobs.js";
import type { Plane } from "../plane/connect.js";
import { decodeJson } from "../protocol/decode.js";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import { MsgIds } from "../protocol/ids.js";
import {
  type AttemptResult,
  AttemptResultSchema,
  AttemptSignalSchema,
  inlinePatchText,
  type LedgerCall,
  MessageTypes,
} from "../protocol/messages.js";
import { usdToNano } from "../protocol/money.js";
import type { Pacer } from "../protocol/pacer.js";
import { ownSecrets, redactSecrets, sanitizeOutput, secretsFromEnv } from "../protocol/redact.js";
import { BlobNames, Subjects } from "../protocol/subjects.js";
import type { RetryPolicy } from "../shim/index.js";
import { fetchAttemptKey, fetchJob } from "./job.js";
import { type CollectedPatch, collectPatch } from "./patch.js";
import type { TaskRef } from "./ref.js";
import {
  attemptStatus,
  exitProblems,
  isEnvironmentFailure,
  runPriceTable,
  sumTotals,
  usageOf,
  withRetries,
} from "./result.js";
import { releaseRunner } from "./runner.js";
import type { HarnessSandbox } from "./sandbox.js";
import { selectSandbox } from "./sandbox-select.js";
import {
  planSessions,
  runSession,
  type SessionContext,
  type SessionOutcome,
  sessionClean,
} from "./session.js";
import { buildTrajectory, countToolCalls } from "./trajectory.js";
import { attemptDirs, prepareWorkdir } from "./workdir.js";

export { HARNESS_DUMMY_KEY } from "./session.js";

/** What one attempt runs with: the task role's settings (config/task.ts), handed over by its entry point. */
export interface RunTaskOptions {
  /** an open plane (the caller keeps it) */
  plane: Plane;
  /** the gateway (or a provider) the shim forwards to: EVALFLEET_GATEWAY_URL */
  upstream: string;
  /** the run's key the shim forwards with (EVALFLEET_RUN_KEY, else the jobs bucket); never the harness's */
  runKey?: string;
  /** root of attempt workdirs (EVALFLEET_WORKDIR) */
  workRoot: string;
  /** the git mirror cache (EVALFLEET_GIT_MIRRORS) */
  mirrorRoot: string;
  /** where mirrors of remote repositories come from (EVALFLEET_GIT_REMOTE_BASE) */
  gitRemoteBase?: string;
  /** keep the attempt's folder after publishing (EVALFLEET_KEEP_WORKDIR) */
  keepWorkdir?: boolean;
  /** the environment harnesses start from (the task's own, as it was started); its secrets are redacted */
  env: Readonly<Record<string, string | undefined>>;
  logger?: Logger;
  pacer?: Pacer;
  retry?: Partial<RetryPolicy>;
  /** overrides the run's timeout_seconds (tests) */
  timeoutMs?: number;
  /** SIGTERM → SIGKILL grace when the harness is stopped */
  graceMs?: number;
  /** aborted (the task got SIGTERM from its backend): stop the harness, then store and publish as usual */
  signal?: AbortSignal;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Run one attempt and publish its result. Returns the published result. */
export async function runTask(ref: TaskRef, opts: RunTaskOptions): Promise<AttemptResult> {
  const env = opts.env as NodeJS.ProcessEnv;
  const log = opts.logger ?? silentLogger();
  const startedAt = new Date();
  const secrets = [...secretsFromEnv(env), ...ownSecrets()];
  if (opts.runKey) secrets.push(opts.runKey);
  const plane = opts.plane;
  const workRoot = opts.workRoot;
  const dirs = attemptDirs(workRoot, ref);
  const calls: LedgerCall[] = [];
  const errors: string[] = [];
  const outcomes: SessionOutcome[] = [];
  let patch: CollectedPatch | null = null;
  let trajectoryText = "";
  // The harness never ran because the environment failed (container, image, disk): INFRA_FAILURE, not the model's.
  let neverStarted = false;
  let numToolCalls = 0;
  let multiPhase = false;
  let cancelDetail: string | null = null;
  let ctx: SessionContext | undefined;
  let sandbox: HarnessSandbox | undefined;
  const cancel = (detail: string) => {
    cancelDetail ??= detail;
    ctx?.stopCurrent?.("cancel");
  };
  const onAbort = () =>
    cancel(`task stopped${opts.signal?.reason ? ` (${String(opts.signal.reason)})` : ""}`);
  if (opts.signal?.aborted) onAbort();
  else opts.signal?.addEventListener("abort", onAbort, { once: true });
  // The attempt's signal subject: the shim's cap signal, or a cancel from the dispatcher.
  const sub = plane.nc.subscribe(Subjects.attemptSignal(ref.run, ref.cell, ref.attempt), {
    callback: (_err, msg) => {
      let reason = "";
      try {
        reason = decodeJson(AttemptSignalSchema, msg.data, "attempt signal").reason;
      } catch {
        // Not a signal this version reads: still a request to stop, so stop (as a cancel).
        reason = "cancelled (an unreadable signal)";
      }
      if (reason === "budget_exceeded" || reason === "max_turns_exceeded") ctx?.stopCurrent?.("cap");
      else cancel(reason || "cancelled");
    },
  });
  try {
    try {
      // A task reads by direct get, which any replica of a clustered bucket may answer: one that has not caught up
      // with the planner's and dispatcher's writes yet answers "no such key", so a miss is tried again briefly.
      const stale = { tries: 5, baseMs: 100, maxMs: 1_000 };
      const job = await retry(() => fetchJob(plane.kv.jobs, ref), {
        ...stale,
        retryError: (err) => err instanceof EvalfleetError && err.code === ErrorCode.NotFound,
      });
      const upstream = opts.upstream;
      // An explicit key wins (a task run by hand against a provider); otherwise the attempt's own key the dispatcher
      // minted at launch, capped and bound to this cell at the gateway. There is no run-wide key.
      const runKey =
        opts.runKey ??
        (await retry(() => fetchAttemptKey(plane.kv.jobs, ref.run, ref.cell, ref.attempt), {
          ...stale,
          retryValue: (k) => k === null,
        }));
      if (!runKey)
        throw new EvalfleetError(
          ErrorCode.InvalidConfig,
          `no gateway key: EVALFLEET_RUN_KEY is not set and the jobs bucket has no key for attempt ${ref.attempt} of ${ref.cell} in run ${ref.run} (the dispatcher mints it at launch)`,
        );
      if (runKey.length >= 6) secrets.push(runKey);
      const adapter = adapterFor(job.harness.adapter);
      // harness.version pins the CLI: a different one installed stops the attempt before anything runs.
      const versionProblem = harnessVersionProblem(
        job.harness.adapter,
        job.harness.version,
        job.harness.settings,
      );
      if (versionProblem) throw new EvalfleetError(ErrorCode.InvalidConfig, versionProblem);
      const prepared = await prepareWorkdir({
        ref,
        task: job.task,
        libraryDir: job.config.task_library_path,
        workRoot,
        mirrorRoot: opts.mirrorRoot,
        ...(opts.gitRemoteBase ? { gitRemoteBase: opts.gitRemoteBase } : {}),
      });
      // Two containers (ECS): the harness (another uid, this one's group) writes its tree; the task's own folder
      // (the trusted git dir, the trajectories) stays this user's alone.
      if (env.EVALFLEET_HARNESS_RUNNER) await chmod(dirs.taskDir, 0o700);
      const { prices, aliases } = runPriceTable(job.config);
      sandbox = await selectSandbox({
        env,
        ref,
        task: job.task,
        config: job.config,
        dirs: prepared.dirs,
        log,
      });
      ctx = {
        sandbox,
        plane,
        ref,
        work: job.work,
        task: job.task,
        settings: job.harness.settings,
        timeoutSeconds: job.config.timeout_seconds,
        dirs: prepared.dirs,
        adapter,
        upstream,
        runKey,
        prices,
        aliases,
        env,
        log,
        calls,
        cancelled: () => cancelDetail !== null,
        ...(opts.pacer ? { pacer: opts.pacer } : {}),
        ...(opts.retry ? { retry: opts.retry } : {}),
        ...(opts.graceMs !== undefined ? { graceMs: opts.graceMs } : {}),
      };
      // The attempt's caps hold across its sessions: each phase gets what the earlier ones left.
      const budget = job.config.max_cost_usd === undefined ? null : usdToNano(job.config.max_cost_usd);
      const maxTurns = job.config.max_turns ?? null;
      // The timeout is the harness's: it starts once the workdir is ready, so a slow clone does not eat into it.
      const deadline = Date.now() + (opts.timeoutMs ?? job.config.timeout_seconds * 1000);
      const sessions = planSessions(job);
      multiPhase = sessions.some((s) => s.phase !== null);
      for (const [i, spec] of sessions.entries()) {
        const used = sumTotals(outcomes.map((o) => o.totals));
        const o = await runSession(ctx, spec, i, {
          budgetNanoUsd: budget === null ? null : budget - BigInt(used.costNanoUsd),
          maxTurns: maxTurns === null ? null : Math.max(0, maxTurns - used.turns),
          timeoutMs: deadline - Date.now(),
        });
        outcomes.push(o);
        if (o.error) errors.push(multiPhase ? `phase ${spec.phase}: ${o.error}` : o.error);
        if (!sessionClean(o)) break;
      }
      try {
        patch = await collectPatch({
          worktree: prepared.dirs.repo,
          gitDir: prepared.dirs.baseGitDir,
          baseCommit: prepared.baseCommit,
          scratchDir: prepared.dirs.taskDir,
        });
      } catch (err) {
        errors.push(`patch collection failed: ${errorText(err)}`);
      }
      const files = [...new Set(outcomes.flatMap((o) => o.files))];
      const traj = await buildTrajectory(calls, files, secrets, [dirs.harnessRoot, dirs.taskDir]);
      trajectoryText = traj.text;
      numToolCalls = countToolCalls(traj.harnessEvents);
    } catch (err) {
      errors.push(errorText(err));
      if (outcomes.length === 0 && isEnvironmentFailure(err)) neverStarted = true;
      log.warn({ err: redactSecrets(errorText(err), secrets) }, "harness task failed");
      if (calls.length > 0 && trajectoryText === "")
        trajectoryText = (await buildTrajectory(calls, [], secrets, [])).text;
    }
    const last = outcomes.at(-1);
    const totals = sumTotals(outcomes.map((o) => o.totals));
    const capReason = outcomes.find((o) => o.totals?.capReason)?.totals?.capReason ?? null;
    errors.push(...exitProblems(last?.exit ?? null, cancelDetail));
    const infraStop = neverStarted ? "never_started" : (totals.infraStop ?? null);
    const status = attemptStatus(
      capReason,
      last?.exit ?? null,
      last?.report ?? null,
      patch?.bytes.length ?? 0,
      infraStop,
    );
    if (status === "INFRA_FAILURE") errors.unshift(`infrastructure: ${infraStop}`);
    if (capReason) errors.unshift(`cap reached: ${capReason}`);
    const joined = (f: "stdout" | "stderr") =>
      outcomes
        .map((o) => (multiPhase ? `--- phase ${o.spec.phase} ---\n` : "") + (o.exit?.[f] ?? ""))
        .join("\n");
    const stdout = sanitizeOutput(joined("stdout"), secrets);
    const stderr = sanitizeOutput(joined("stderr"), secrets);
    const refs = await store(plane, ref, { patch, trajectoryText, stdout, stderr });
    const finishedAt = new Date();
    const reported = outcomes.map((o) => o.report?.reportedCostNanoUsd ?? null).filter((c) => c !== null);
    const attempt: AttemptResult = AttemptResultSchema.parse({
      type: MessageTypes.attemptResult,
      run: ref.run,
      cellId: ref.cell,
      attempt: ref.attempt,
      status,
      exitCode: last?.exit?.exitCode ?? null,
      usage: usageOf(outcomes.length ? totals : null),
      numToolCalls,
      patchHash: refs.patchRef !== null || refs.patch !== null ? (patch?.sha256 ?? null) : null,
      patchRef: refs.patchRef,
      patch: refs.patch,
      trajectoryRef: refs.trajectoryRef,
      stdout,
      stderr,
      errorMessage: errors.length ? sanitizeOutput(errors.join("; "), secrets) : null,
      harnessReportedCostNanoUsd: reported.length ? reported.reduce((a, b) => a + b, 0) : null,
      startedAt: startedAt.toISOString(),
      finishedAt: finishedAt.toISOString(),
      latencyMs: finishedAt.getTime() - startedAt.getTime(),
      timeToFirstAttemptMs: null,
      phases: multiPhase ? outcomes.map((o) => phaseOutcome(o, secrets)) : [],
      sandbox: sandbox?.kind ?? null,
    });
    // The msgID makes a retried publish (an ack lost on the way back) land once.
    await withRetries(() =>
      plane.js.publish(Subjects.attempts.one(ref.run, ref.cell, ref.attempt), JSON.stringify(attempt), {
        msgID: MsgIds.attemptResult(ref.run, ref.cell, ref.attempt),
      }),
    );
    log.info({ run: ref.run, cell: ref.cell, attempt: ref.attempt, status }, "attempt result published");
    return attempt;
  } finally {
    ctx?.stopCurrent?.("cancel");
    await sandbox?.close().catch((err) => log.warn({ err }, "sandbox cleanup failed"));
    if (env.EVALFLEET_HARNESS_RUNNER) await releaseRunner(env.EVALFLEET_HARNESS_RUNNER).catch(() => {});
    sub.unsubscribe();
    opts.signal?.removeEventListener("abort", onAbort);
    if (!opts.keepWorkdir) await rm(dirs.attemptDir, { recursive: true, force: true }).catch(() => {});
  }
}

type PhaseOutcome = AttemptResult["phases"][number];

function phaseOutcome(o: SessionOutcome, secrets: readonly string[]): PhaseOutcome {
  return {
    name: o.spec.phase ?? "main",
    traceId: o.spec.traceId,
    model: o.spec.model.name,
    modelRole: o.spec.role,
    exitCode: o.exit?.exitCode ?? null,
    durationMs: o.durationMs,
    timedOut: o.exit?.stoppedFor === "timeout",
    usage: usageOf(o.totals),
    error: o.error ?? (exitProblems(o.exit, null)[0] || o.totals?.capReason) ?? null,
    stdout: sanitizeOutput(o.exit?.stdout ?? "", secrets),
    stderr: sanitizeOutput(o.exit?.stderr ?? "", secrets),
  };
}

/**
 * Put the attempt's blobs: the patch (when there is one and it cannot travel inline in the result), the trajectory,
 * and both output streams.
 */
async function store(
  plane: Plane,
  ref: TaskRef,
  b: { patch: CollectedPatch | null; trajectoryText: string; stdout: string; stderr: string },
): Promise<{ patchRef: string | null; patch: string | null; trajectoryRef: string | null }> {
  const name = (f: Parameters<typeof BlobNames.attempt>[3]) =>
    BlobNames.attempt(ref.run, ref.cell, ref.attempt, f);
  const put = async (f: Parameters<typeof BlobNames.attempt>[3], data: Uint8Array): Promise<string> => {
    // Chunks under the attempt's own prefix: all its NATS user may write (plane/blobs.ts).
    await withRetries(() =>
      putOwnBlob(plane.js, name(f), attemptChunkId(ref.run, ref.cell, ref.attempt), data),
    );
    return name(f);
  };
  const patch = b.patch ? inlinePatchText(b.patch.bytes) : null;
  const patchRef =
    b.patch && b.patch.bytes.length > 0 && patch === null ? await put("patch.diff", b.patch.bytes) : null;
  const trajectoryRef = b.trajectoryText
    ? await put("trajectory.jsonl", Buffer.from(b.trajectoryText))
    : null;
  await put("stdout.txt", Buffer.from(b.stdout));
  await put("stderr.txt", Buffer.from(b.stderr));
  return { patchRef, patch, trajectoryRef };
}
