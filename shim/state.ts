import { EventEmitter } from "node:events";
import { emptyUsage, type Usage } from "../protocol/messages.js";
import type { TokenUsage } from "../providers/types.js";

export type CapReason = "budget_exceeded" | "max_turns_exceeded";
/**
 * The environment stopping the attempt's model calls: 429s / overloads past the shim's retries, or the provider's
 * own spend limit. The task reports such an attempt as an infrastructure failure, not the model's.
 */
export type InfraStop = "rate_limit_exhausted" | "provider_spend_limit";

/**
 * The attempt's running totals, as totals() returns them and the progress key shows them: the attempt's usage
 * (`calls` counts ledger rows — every attempt at every call, refusals included) and what the shim did.
 */
export interface ShimTotals extends Usage {
  /** calls that completed (status ok): the turns a max-turns cap counts */
  turns: number;
  pacerWaitMs: number;
  retries: number;
  clamps: number;
  refused: number;
  estimatedCalls: number;
  capReason: CapReason | null;
  /** the first infrastructure stop a call met, if any */
  infraStop: InfraStop | null;
}

/** A session's totals before its first call. */
export function emptyTotals(): ShimTotals {
  return {
    ...emptyUsage(),
    turns: 0,
    pacerWaitMs: 0,
    retries: 0,
    clamps: 0,
    refused: 0,
    estimatedCalls: 0,
    capReason: null,
    infraStop: null,
  };
}

/** What the session-end signal carries (the callback argument, and the JSON of the core publish). */
export interface CapEvent {
  reason: CapReason;
  run: string;
  cellId: string;
  attempt: number;
  costNanoUsd: number;
  budgetNanoUsd: number | null;
  turns: number;
  maxTurns: number | null;
  at: string;
}

/**
 * Running totals and the caps. Money in flight is reserved (the worst case a call may cost) so concurrent calls can
 * not jointly overrun the budget; the reservation is released when the call's real cost is added.
 */
export class AttemptState {
  readonly totals: ShimTotals = emptyTotals();
  reservedNanoUsd = 0n;
  readonly events = new EventEmitter();

  constructor(
    readonly budgetNanoUsd: bigint | null,
    readonly maxTurns: number | null,
  ) {
    this.events.setMaxListeners(0);
  }

  /** Budget left for new calls: budget − spent − reserved (null when uncapped). */
  remainingNanoUsd(): bigint | null {
    if (this.budgetNanoUsd === null) return null;
    return this.budgetNanoUsd - BigInt(this.totals.costNanoUsd) - this.reservedNanoUsd;
  }

  add(
    usage: TokenUsage,
    costNanoUsd: number,
    opts: { ok: boolean; estimated: boolean; retry: boolean },
  ): void {
    const t = this.totals;
    t.calls++;
    if (opts.ok) t.turns++;
    if (opts.estimated) t.estimatedCalls++;
    if (opts.retry) t.retries++;
    t.inputTokens += usage.inputTokens;
    t.outputTokens += usage.outputTokens;
    t.cacheReadTokens += usage.cacheReadTokens;
    t.cacheWriteTokens += usage.cacheWriteTokens;
    t.reasoningTokens += usage.reasoningTokens;
    t.costNanoUsd += costNanoUsd;
  }

  /** The cap reached now, if any: the budget is spent. (Turns are checked when a call beyond them is asked for.) */
  reached(): CapReason | null {
    if (this.totals.capReason) return this.totals.capReason;
    if (this.budgetNanoUsd !== null && BigInt(this.totals.costNanoUsd) >= this.budgetNanoUsd)
      return "budget_exceeded";
    return null;
  }

  /**
   * Is a new call over the turn cap? max_turns = N allows N calls: the cap is reached when call N + 1 is asked for,
   * so a harness that finishes in exactly N turns is not marked as stopped by the cap.
   */
  overTurns(): boolean {
    return this.maxTurns !== null && this.totals.turns >= this.maxTurns;
  }
}
