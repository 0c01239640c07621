/**
 * The harness task: one attempt of one cell, from a job reference to exactly one published AttemptResult. Whatever
 * happens — the harness finishes, crashes, hangs, or a cap ends the session — the patch so far, the trajectory and
 * the redacted output are stored and a result is published; only an unreachable NATS can stop that.
 */
import { rm } from "node:fs/promises";
import { openPlane, type Plane } from "../../actors/runtime/connect.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { type Logger, silentLogger } from "../../protocol/log.js";
import {
  type AttemptResult,
  AttemptResultSchema,
  type LedgerCall,
  MessageTypes,
} from "../../protocol/messages.js";
import type { Pacer } from "../../protocol/pacer.js";
import { redactSecrets, sanitizeOutput, secretsFromEnv } from "../../protocol/redact.js";
import { BlobNames, Subjects } from "../../protocol/subjects.js";
import { adapterFor } from "../adapters/index.js";
import type { RetryPolicy } from "../proxy/index.js";
import { fetchJob, fetchRunKey } from "./job.js";
import { type CollectedPatch, collectPatch } from "./patch.js";
import type { TaskRef } from "./ref.js";
import {
  attemptStatus,
  exitProblems,
  runPriceTable,
  sumTotals,
  usageOf,
  usdToNanoUsd,
  withRetries,
} from "./result.js";
import {
  planSessions,
  runSession,
  type SessionContext,
  type SessionOutcome,
  sessionClean,
} from "./session.js";
import { buildTrajectory, countToolCalls } from "./trajectory.js";
import { attemptDirs, defaultMirrorRoot, defaultWorkRoot, prepareWorkdir } from "./workdir.js";

export { HARNESS_DUMMY_KEY } from "./session.js";

export interface RunTaskOptions {
  /** an open plane (the caller keeps it); otherwise one is opened on NATS_URL and closed at the end */
  plane?: Plane;
  /** the gateway or provider the shim forwards to (default EVALFLEET_UPSTREAM_URL) */
  upstream?: string;
  /** the run's key the shim forwards with (default EVALFLEET_RUN_KEY, else the jobs bucket); never the harness's */
  runKey?: string;
  /** default EVALFLEET_WORKDIR, else a folder under the OS temp dir */
  workRoot?: string;
  /** default EVALFLEET_GIT_MIRRORS, else a folder under the OS temp dir */
  mirrorRoot?: string;
  /** keep the attempt's folder after publishing (default: EVALFLEET_KEEP_WORKDIR=1) */
  keepWorkdir?: boolean;
  env?: NodeJS.ProcessEnv;
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
export async function runTask(ref: TaskRef, opts: RunTaskOptions = {}): Promise<AttemptResult> {
  const env = opts.env ?? process.env;
  const log = opts.logger ?? silentLogger();
  const startedAt = new Date();
  const secrets = secretsFromEnv(env);
  if (opts.runKey) secrets.push(opts.runKey);
  const plane =
    opts.plane ?? (await openPlane({ name: `task-${ref.run}-${ref.cell}-${ref.attempt}`, ensure: false }));
  const workRoot = opts.workRoot ?? defaultWorkRoot(env);
  const dirs = attemptDirs(workRoot, ref);
  const calls: LedgerCall[] = [];
  const errors: string[] = [];
  const outcomes: SessionOutcome[] = [];
  let patch: CollectedPatch | null = null;
  let trajectoryText = "";
  let numToolCalls = 0;
  let multiPhase = false;
  let cancelDetail: string | null = null;
  let ctx: SessionContext | undefined;
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
        reason = String((msg.json() as { reason?: unknown }).reason ?? "");
      } catch {
        reason = msg.string();
      }
      if (reason === "budget_exceeded" || reason === "max_turns_exceeded") ctx?.stopCurrent?.("cap");
      else cancel(reason || "cancelled");
    },
  });
  try {
    try {
      const job = await fetchJob(plane.kv.jobs, ref);
      const upstream = opts.upstream ?? env.EVALFLEET_UPSTREAM_URL;
      // An explicit key wins; otherwise the run's gateway key the planner left in the jobs bucket.
      const runKey = opts.runKey ?? env.EVALFLEET_RUN_KEY ?? (await fetchRunKey(plane.kv.jobs, ref.run));
      if (!upstream) throw new EvalfleetError(ErrorCode.InvalidConfig, "EVALFLEET_UPSTREAM_URL is not set");
      if (!runKey)
        throw new EvalfleetError(
          ErrorCode.InvalidConfig,
          `no run key: EVALFLEET_RUN_KEY is not set and the jobs bucket has none for run ${ref.run}`,
        );
      if (runKey.length >= 6) secrets.push(runKey);
      const adapter = adapterFor(job.harness.adapter);
      const prepared = await prepareWorkdir({
        ref,
        task: job.task,
        libraryDir: job.config.task_library_path,
        workRoot,
        mirrorRoot: opts.mirrorRoot ?? defaultMirrorRoot(env),
        env,
      });
      const { prices, aliases } = runPriceTable(job.config);
      ctx = {
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
      const budget = job.config.max_cost_usd === undefined ? null : usdToNanoUsd(job.config.max_cost_usd);
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
        patch = await collectPatch(prepared.dirs.repo, prepared.baseCommit, prepared.dirs.out);
      } catch (err) {
        errors.push(`patch collection failed: ${errorText(err)}`);
      }
      const files = [...new Set(outcomes.flatMap((o) => o.files))];
      const traj = await buildTrajectory(calls, files, secrets);
      trajectoryText = traj.text;
      numToolCalls = countToolCalls(traj.harnessEvents);
    } catch (err) {
      errors.push(errorText(err));
      log.warn({ err: redactSecrets(errorText(err), secrets) }, "harness task failed");
      if (calls.length > 0 && trajectoryText === "")
        trajectoryText = (await buildTrajectory(calls, [], secrets)).text;
    }
    const last = outcomes.at(-1);
    const totals = sumTotals(outcomes.map((o) => o.totals));
    const capReason = outcomes.find((o) => o.totals?.capReason)?.totals?.capReason ?? null;
    errors.push(...exitProblems(last?.exit ?? null, cancelDetail));
    const status = attemptStatus(
      capReason,
      last?.exit ?? null,
      last?.report ?? null,
      patch?.bytes.length ?? 0,
    );
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
      patchHash: refs.patchRef ? (patch?.sha256 ?? null) : null,
      patchRef: refs.patchRef,
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
    });
    // The msgID makes a retried publish (an ack lost on the way back) land once.
    await withRetries(() =>
      plane.js.publish(Subjects.attempts.one(ref.run, ref.cell), JSON.stringify(attempt), {
        msgID: `${ref.run}/${ref.cell}/${ref.attempt}`,
      }),
    );
    log.info({ run: ref.run, cell: ref.cell, attempt: ref.attempt, status }, "attempt result published");
    return attempt;
  } finally {
    ctx?.stopCurrent?.("cancel");
    sub.unsubscribe();
    opts.signal?.removeEventListener("abort", onAbort);
    if (!(opts.keepWorkdir ?? env.EVALFLEET_KEEP_WORKDIR === "1"))
      await rm(dirs.attemptDir, { recursive: true, force: true }).catch(() => {});
    if (!opts.plane) await plane.close();
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

/** Put the attempt's blobs: the patch (when there is one), the trajectory, and both output streams. */
async function store(
  plane: Plane,
  ref: TaskRef,
  b: { patch: CollectedPatch | null; trajectoryText: string; stdout: string; stderr: string },
): Promise<{ patchRef: string | null; trajectoryRef: string | null }> {
  const name = (f: Parameters<typeof BlobNames.attempt>[3]) =>
    BlobNames.attempt(ref.run, ref.cell, ref.attempt, f);
  const put = async (f: Parameters<typeof BlobNames.attempt>[3], data: Uint8Array): Promise<string> => {
    await withRetries(() => plane.blobs.putBlob({ name: name(f) }, data));
    return name(f);
  };
  const patchRef = b.patch && b.patch.bytes.length > 0 ? await put("patch.diff", b.patch.bytes) : null;
  const trajectoryRef = b.trajectoryText
    ? await put("trajectory.jsonl", Buffer.from(b.trajectoryText))
    : null;
  await put("stdout.txt", Buffer.from(b.stdout));
  await put("stderr.txt", Buffer.from(b.stderr));
  return { patchRef, trajectoryRef };
}
