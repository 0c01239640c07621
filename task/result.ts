/** The pure parts of a harness task's result: money, prices, status, usage, and error wording. */

import type { HarnessReport } from "../harnesses/types.js";
import { retry } from "../lib/retry.js";
import type { ModelSpec, RunConfig } from "../protocol/config.js";
import { ErrorCode, EvalfleetError, isStorageFull } from "../protocol/errors.js";
import { type AttemptStatus, emptyUsage, type Usage } from "../protocol/messages.js";
import type { PriceTable } from "../providers/pricing.js";
import { runPriceTable as pricesOfModels, wireModelId } from "../providers/run-prices.js";
import { emptyTotals, type ShimTotals } from "../shim/index.js";
import type { HarnessExit } from "./supervise.js";

/** The run's config prices over the pinned data, keyed by the id the harness sends. */
export function runPriceTable(config: RunConfig): { prices: PriceTable; aliases: Record<string, string> } {
  return pricesOfModels(config.models);
}

export function modelId(m: ModelSpec): string {
  return wireModelId(m);
}

/** The attempt's usage out of the shim's totals (which carry more); none: empty. */
export function usageOf(t: ShimTotals | null): Usage {
  const u = emptyUsage();
  if (t) for (const k of Object.keys(u) as Array<keyof Usage>) u[k] = t[k];
  return u;
}

/**
 * Why the environment, not the model, ended an attempt: the shim's infrastructure stop (the provider's spend limit;
 * 429s past its retries) or `never_started` (the harness never ran: its container, image, workdir or disk failed).
 */
export type InfraCause = ShimTotals["infraStop"] | "never_started";

/**
 * The seed's order: a cap beats everything (the session was ended for it), then a timeout, then how it exited.
 * Infrastructure comes first: a provider's spend limit or a harness that never started is INFRA_FAILURE, and so is
 * an attempt that met exhausted 429s and left nothing to grade (a patch it left anyway is graded).
 */
export function attemptStatus(
  cap: ShimTotals["capReason"],
  exit: HarnessExit | null,
  report: HarnessReport | null,
  patchBytes: number,
  infra: InfraCause = null,
): AttemptStatus {
  if (infra === "provider_spend_limit" || infra === "never_started") return "INFRA_FAILURE";
  const status = modelStatus(cap, exit, report, patchBytes);
  if (infra === "rate_limit_exhausted" && (status === "EMPTY_PATCH" || status === "HARNESS_ERROR"))
    return "INFRA_FAILURE";
  return status;
}

function modelStatus(
  cap: ShimTotals["capReason"],
  exit: HarnessExit | null,
  report: HarnessReport | null,
  patchBytes: number,
): AttemptStatus {
  if (cap === "budget_exceeded") return "BUDGET_EXCEEDED";
  if (cap === "max_turns_exceeded") return "MAX_TURNS_EXCEEDED";
  if (!exit) return "HARNESS_ERROR";
  if (exit.stoppedFor === "timeout") return "TIMEOUT";
  if (report?.status === "MAX_TURNS_EXCEEDED") return "MAX_TURNS_EXCEEDED";
  if (exit.stoppedFor === "cancel" || exit.spawnError || exit.exitCode !== 0) return "HARNESS_ERROR";
  return patchBytes > 0 ? "PATCH_READY" : "EMPTY_PATCH";
}

/**
 * An error before any session ran that the environment caused (a container runtime or image failure, a full disk,
 * a retryable stop): the harness never started, which is not the model's failure.
 */
export function isEnvironmentFailure(err: unknown): boolean {
  if (err instanceof EvalfleetError) return err.retryable || err.code === ErrorCode.Unavailable;
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return code === "ENOSPC" || code === "EDQUOT";
}

/**
 * A NATS write that may meet a reconnect: tried a few times (writes here are idempotent) before giving up — except
 * when JetStream's storage is full, which is waited out (up to the signal): the attempt's result and blobs are the
 * one record of what it did, and space comes back.
 */
export function withRetries<T>(fn: () => Promise<T>, tries = 5, signal?: AbortSignal): Promise<T> {
  let failures = 0;
  return retry(fn, {
    tries: Number.POSITIVE_INFINITY,
    baseMs: 500,
    maxMs: 8_000,
    retryError: (err) => isStorageFull(err) || ++failures < tries,
    ...(signal ? { signal } : {}),
  });
}

/** What went wrong with the harness process, in words for errorMessage (nothing when it exited 0 by itself). */
export function exitProblems(exit: HarnessExit | null, cancelDetail: string | null): string[] {
  if (!exit) return [];
  if (exit.spawnError) return [`harness did not start: ${exit.spawnError}`];
  if (exit.stoppedFor === "timeout")
    return [`harness timed out after ${Math.round(exit.durationMs / 1000)} s`];
  if (exit.stoppedFor === "cancel") return [`harness stopped: ${cancelDetail ?? "cancelled"}`];
  if (!exit.stoppedFor && exit.exitCode !== 0)
    return [
      `harness exited with ${exit.exitCode === null ? `signal ${exit.signal}` : `code ${exit.exitCode}`}`,
    ];
  return [];
}

/** Totals of several sessions added up (the attempt's usage when it ran in phases). */
export function sumTotals(all: ReadonlyArray<ShimTotals | null>): ShimTotals {
  const sum = emptyTotals();
  for (const t of all) {
    if (!t) continue;
    for (const k of Object.keys(sum) as Array<keyof ShimTotals>)
      if (k !== "capReason" && k !== "infraStop") (sum[k] as number) += t[k] as number;
    sum.capReason ??= t.capReason;
    sum.infraStop ??= t.infraStop;
  }
  return sum;
}
