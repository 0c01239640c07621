import { EventEmitter } from "node:events";
import type { TokenUsage } from "../../providers/types.js";

export type CapReason = "budget_exceeded" | "max_turns_exceeded";

/** The attempt's running totals, as totals() returns them and the progress key shows them. */
export interface ShimTotals {
  /** ledger rows (every attempt at every call, refusals included) */
  calls: number;
  /** calls that completed (status ok): the turns a max-turns cap counts */
  turns: number;
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  reasoningTokens: number;
  costNanoUsd: number;
  pacerWaitMs: number;
  retries: number;
  clamps: number;
  refused: number;
  estimatedCalls: number;
  capReason: CapReason | null;
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
  readonly totals: ShimTotals = {
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
