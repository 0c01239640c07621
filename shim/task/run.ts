/**
 * The harness task: one attempt of one cell, from a job reference to exactly one published AttemptResult. Whatever
 * happens — the harness finishes, crashes, hangs, or a cap ends the session — the patch so far, the trajectory and
 * the redacted output are stored and a result is published; only an unreachable NATS can stop that.
 */
import { rm } from "node:fs/promises";
import path from "node:path";
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
import { redactSecrets, sanitizeOutput } from "../../protocol/redact.js";
import { BlobNames, Subjects } from "../../protocol/subjects.js";
import { buildPrompt } from "../adapters/common.js";
import { adapterFor } from "../adapters/index.js";
import type { HarnessReport } from "../adapters/types.js";
import { type RetryPolicy, type ShimHandle, startShim } from "../proxy/index.js";
import { fetchJob, fetchRunKey } from "./job.js";
import { type CollectedPatch, collectPatch } from "./patch.js";
import type { TaskRef } from "./ref.js";
import {
  attemptStatus,
  exitProblems,
  modelId,
  runPriceTable,
  usageOf,
  usdToNanoUsd,
  withRetries,
} from "./result.js";
import { type HarnessExit, superviseHarness } from "./supervise.js";
import { buildTrajectory, countToolCalls } from "./trajectory.js";
import { attemptDirs, defaultMirrorRoot, defaultWorkRoot, prepareWorkdir } from "./workdir.js";

export interface RunTaskOptions {
  /** an open plane (the caller keeps it); otherwise one is opened on NATS_URL and closed at the end */
  plane?: Plane;
  /** the gateway or provider the shim forwards to (default EVALFLEET_UPSTREAM_URL) */
  upstream?: string;
  /** the run's key the shim forwards with (default EVALFLEET_RUN_KEY); the harness never sees it */
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

/** What the harness sends as its key: never a real credential, the shim swaps in the run's key. */
export const HARNESS_DUMMY_KEY = "evalfleet-shim-holds-the-real-key";

const SECRET_ENV = [
  "EVALFLEET_RUN_KEY",
  "EVALFLEET_UPSTREAM_KEY",
  "ANTHROPIC_API_KEY",
  "ANTHROPIC_AUTH_TOKEN",
  "OPENAI_API_KEY",
  "CLAUDE_CODE_OAUTH_TOKEN",
];

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Run one attempt and publish its result. Returns the published result. */
export async function runTask(ref: TaskRef, opts: RunTaskOptions = {}): Promise<AttemptResult> {
  const env = opts.env ?? process.env;
  const log = opts.logger ?? silentLogger();
  const startedAt = new Date();
  const secrets = SECRET_ENV.map((k) => env[k]).filter(
    (v): v is string => typeof v === "string" && v.length >= 6,
  );
  if (opts.runKey) secrets.push(opts.runKey);
  const plane = opts.plane ?? (await openPlane({ name: `task-${ref.run}-${ref.cell}-${ref.attempt}` }));
  const workRoot = opts.workRoot ?? defaultWorkRoot(env);
  const dirs = attemptDirs(workRoot, ref);
  const calls: LedgerCall[] = [];
  const errors: string[] = [];
  let shim: ShimHandle | undefined;
  let exit: HarnessExit | null = null;
  let report: HarnessReport | null = null;
  let patch: CollectedPatch | null = null;
  let trajectoryText = "";
  let numToolCalls = 0;
  let cancelDetail: string | null = null;
  const unsubscribes: Array<() => void> = [];
  let stopHarness: ((reason: "cancel") => void) | undefined;
  const onAbort = () => {
    cancelDetail ??= `task stopped${opts.signal?.reason ? ` (${String(opts.signal.reason)})` : ""}`;
    stopHarness?.("cancel");
  };
  if (opts.signal?.aborted) onAbort();
  else opts.signal?.addEventListener("abort", onAbort, { once: true });
  unsubscribes.push(() => opts.signal?.removeEventListener("abort", onAbort));
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
      shim = await startShim({
        upstream,
        run: ref.run,
        cell: ref.cell,
        attempt: ref.attempt,
        providerKey: runKey,
        budgetNanoUsd: job.config.max_cost_usd === undefined ? null : usdToNanoUsd(job.config.max_cost_usd),
        maxTurns: job.config.max_turns ?? null,
        host: "127.0.0.1",
        nc: plane.nc,
        pool: job.work.pool,
        traceId: job.work.traceId,
        costMode: job.work.costMode,
        prices,
        aliases,
        logger: log,
        onLedgerRow: (row) => calls.push(row),
        ...(opts.pacer ? { pacer: opts.pacer } : {}),
        ...(opts.retry ? { retry: opts.retry } : {}),
      });
      const launch = await adapter.prepare({
        workdir: prepared.dirs.repo,
        homeDir: prepared.dirs.home,
        outDir: prepared.dirs.out,
        shimUrl: shim.url,
        harnessKey: HARNESS_DUMMY_KEY,
        model: modelId(job.model),
        provider: job.model.provider,
        maxTurns: job.config.max_turns ?? null,
        prompt: buildPrompt(job.task),
        settings: job.harness.settings,
        timeoutSeconds: job.config.timeout_seconds,
      });
      if (opts.signal?.aborted)
        throw new EvalfleetError(
          ErrorCode.Conflict,
          `${cancelDetail ?? "task stopped"} before the harness started`,
        );
      const stdoutFile = launch.stdoutIsTrajectory ? path.join(prepared.dirs.out, "stdout.jsonl") : undefined;
      const sup = superviseHarness({
        command: launch.command,
        args: launch.args,
        cwd: prepared.dirs.repo,
        // Only what the harness needs: none of the task's own secrets (run key, NATS credentials) are inherited.
        env: {
          PATH: env.PATH ?? "/usr/local/bin:/usr/bin:/bin",
          LANG: env.LANG ?? "C.UTF-8",
          TMPDIR: prepared.dirs.home,
          TERM: "dumb",
          NO_COLOR: "1",
          ...launch.env,
        },
        timeoutMs: opts.timeoutMs ?? job.config.timeout_seconds * 1000,
        ...(opts.graceMs !== undefined ? { graceMs: opts.graceMs } : {}),
        ...(stdoutFile ? { stdoutFile } : {}),
      });
      stopHarness = sup.stop;
      unsubscribes.push(shim.onCapReached(() => sup.stop("cap")));
      // The attempt's signal subject: the shim's cap signal, or a cancel from the dispatcher.
      const sub = plane.nc.subscribe(Subjects.attemptSignal(ref.run, ref.cell, ref.attempt), {
        callback: (_err, msg) => {
          let reason = "";
          try {
            reason = String((msg.json() as { reason?: unknown }).reason ?? "");
          } catch {
            reason = msg.string();
          }
          if (reason === "budget_exceeded" || reason === "max_turns_exceeded") sup.stop("cap");
          else {
            cancelDetail ??= reason || "cancelled";
            sup.stop("cancel");
          }
        },
      });
      unsubscribes.push(() => sub.unsubscribe());
      exit = await sup.done;
      report = adapter.report ? adapter.report(exit.stdout) : null;
      await shim.drain();
      try {
        patch = await collectPatch(prepared.dirs.repo, prepared.baseCommit, prepared.dirs.out);
      } catch (err) {
        errors.push(`patch collection failed: ${errorText(err)}`);
      }
      const files = [...(stdoutFile ? [stdoutFile] : []), ...(launch.trajectoryFiles ?? [])];
      const traj = await buildTrajectory(calls, files, secrets);
      trajectoryText = traj.text;
      numToolCalls = countToolCalls(traj.harnessEvents);
    } catch (err) {
      errors.push(errorText(err));
      log.warn(
        { err: redactSecrets(errorText(err), secrets) },
        "harness task failed before the harness finished",
      );
      if (calls.length > 0 && trajectoryText === "")
        trajectoryText = (await buildTrajectory(calls, [], secrets)).text;
    }
    const totals = shim?.totals() ?? null;
    errors.push(...exitProblems(exit, cancelDetail));
    const status = attemptStatus(totals?.capReason ?? null, exit, report, patch?.bytes.length ?? 0);
    if (totals?.capReason) errors.unshift(`cap reached: ${totals.capReason}`);
    const stdout = sanitizeOutput(exit?.stdout ?? "", secrets);
    const stderr = sanitizeOutput(exit?.stderr ?? "", secrets);
    const result = await store(plane, ref, { patch, trajectoryText, stdout, stderr });
    const finishedAt = new Date();
    const attempt: AttemptResult = AttemptResultSchema.parse({
      type: MessageTypes.attemptResult,
      run: ref.run,
      cellId: ref.cell,
      attempt: ref.attempt,
      status,
      exitCode: exit?.exitCode ?? null,
      usage: usageOf(totals),
      numToolCalls,
      patchHash: result.patchRef ? (patch?.sha256 ?? null) : null,
      patchRef: result.patchRef,
      trajectoryRef: result.trajectoryRef,
      stdout,
      stderr,
      errorMessage: errors.length ? sanitizeOutput(errors.join("; "), secrets) : null,
      harnessReportedCostNanoUsd: report?.reportedCostNanoUsd ?? null,
      startedAt: startedAt.toISOString(),
      finishedAt: finishedAt.toISOString(),
      latencyMs: finishedAt.getTime() - startedAt.getTime(),
      timeToFirstAttemptMs: null,
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
    // Never leave a harness behind, whatever threw (a no-op once it has exited).
    stopHarness?.("cancel");
    for (const u of unsubscribes) u();
    await shim?.close().catch(() => {});
    if (!(opts.keepWorkdir ?? env.EVALFLEET_KEEP_WORKDIR === "1"))
      await rm(dirs.attemptDir, { recursive: true, force: true }).catch(() => {});
    if (!opts.plane) await plane.close();
  }
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
