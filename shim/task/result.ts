/** The pure parts of a harness task's result: money, prices, status, usage, and error wording. */
import type { ModelSpec, RunConfig } from "../../protocol/config.js";
import type { AttemptStatus, Usage } from "../../protocol/messages.js";
import { type ModelPrice, PriceTable } from "../../providers/pricing.js";
import type { HarnessReport } from "../adapters/types.js";
import type { ShimTotals } from "../proxy/index.js";
import type { HarnessExit } from "./supervise.js";

/** USD (a config number) → integer nano-USD, through its decimal text so 0.1 is exactly 100_000_000. */
export function usdToNanoUsd(usd: number): bigint {
  const m = /^(\d+)(?:\.(\d{1,9}))?\d*$/.exec(usd.toFixed(12).replace(/0+$/, "").replace(/\.$/, ""));
  if (!m) return BigInt(Math.round(usd * 1e9));
  return BigInt(m[1] as string) * 1_000_000_000n + BigInt((m[2] ?? "").padEnd(9, "0") || "0");
}

/** The run's config prices over the default table, keyed by the id the harness sends. */
export function runPriceTable(config: RunConfig): { prices: PriceTable; aliases: Record<string, string> } {
  const overrides: Record<string, Partial<ModelPrice>> = {};
  const aliases: Record<string, string> = {};
  for (const m of config.models) {
    if (m.alias && m.alias !== m.name) aliases[m.alias] = m.name;
    const p = m.prices;
    if (!p) continue;
    const entry: Partial<ModelPrice> = { input: p.input_per_mtok, output: p.output_per_mtok };
    if (p.cache_read_per_mtok !== undefined) entry.cacheRead = p.cache_read_per_mtok;
    if (p.cache_write_per_mtok !== undefined) entry.cacheWrite5m = p.cache_write_per_mtok;
    if (p.cache_write_1h_per_mtok !== undefined) entry.cacheWrite1h = p.cache_write_1h_per_mtok;
    overrides[m.name] = entry;
  }
  return { prices: new PriceTable(overrides), aliases };
}

export function modelId(m: ModelSpec): string {
  return m.alias ?? m.name;
}

export function usageOf(t: ShimTotals | null): Usage {
  return {
    inputTokens: t?.inputTokens ?? 0,
    outputTokens: t?.outputTokens ?? 0,
    cacheReadTokens: t?.cacheReadTokens ?? 0,
    cacheWriteTokens: t?.cacheWriteTokens ?? 0,
    reasoningTokens: t?.reasoningTokens ?? 0,
    costNanoUsd: t?.costNanoUsd ?? 0,
    calls: t?.calls ?? 0,
  };
}

/** The seed's order: a cap beats everything (the session was ended for it), then a timeout, then how it exited. */
export function attemptStatus(
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

/** A NATS write that may meet a reconnect: tried a few times (writes here are idempotent) before giving up. */
export async function withRetries<T>(fn: () => Promise<T>, tries = 5): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await fn();
    } catch (err) {
      if (i >= tries) throw err;
      await new Promise((r) => setTimeout(r, 250 * 2 ** i));
    }
  }
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
  const sum: ShimTotals = {
    calls: 0,
    turns: 0,
    inputTokens: 0,
    outputTokens: 0,
    cacheReadTokens: 0,
    cacheWriteTokens: 0,
    reasoningTokens: 0,
    costNanoUsd: 0,
    pacerWaitMs: 0,
    retries: 0,
    clamps: 0,
    refused: 0,
    estimatedCalls: 0,
    capReason: null,
  };
  for (const t of all) {
    if (!t) continue;
    for (const k of Object.keys(sum) as Array<keyof ShimTotals>)
      if (k !== "capReason") (sum[k] as number) += t[k] as number;
    sum.capReason ??= t.capReason;
  }
  return sum;
}
