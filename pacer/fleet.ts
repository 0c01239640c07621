import type { PoolLimits } from "./bucket.js";
import type { PoolStatsSnapshot } from "./pool.js";

/**
 * Fleet sizing by Little's law: how many attempts of one pool to run at once so the pool's limits are used and
 * nobody queues on the pacer. The binding limit gives the pool's call rate λ (calls/s); one attempt makes calls at
 * rate callsPerAttempt / attemptDurationMs (or back to back, 1 / callLatencyMs, when the attempt's duration is not
 * known yet); the concurrency that sustains λ is λ divided by one attempt's rate. Calls in flight at that rate are
 * λ × latency (Little's law again), reported for the dashboard. Pure: the planner and dispatcher call it with the
 * pool's observed figures and write the result, with its inputs, into the run's progress key.
 */

export interface FleetObservation {
  /**
   * Mean tokens per call as the pool charges them (cache reads at their rate-limit weight). A bare number is a
   * total with no split: it is counted in full against each token limit, which can only under-size (the safe way).
   */
  tokensPerCall: number | { inputTokens: number; outputTokens: number };
  callsPerAttempt: number;
  callLatencyMs: number;
  /** Mean wall time of one attempt; when absent, an attempt is assumed to call back to back. */
  attemptDurationMs?: number;
}

export interface SizeFleetInput {
  limits: PoolLimits;
  observed: FleetObservation;
  /** Fraction of the limit to aim at (default 0.95: leave room for estimate error and other users of the key). */
  utilization?: number;
  /** Attempts still to run: no point launching more. */
  pendingAttempts?: number;
  /** Hard ceiling from the backend (e.g. the Fargate launch budget). */
  maxConcurrency?: number;
}

export type BindingLimit = "requests" | "inputTokens" | "outputTokens" | "tokens" | "none";

export interface FleetSize {
  /** Attempts to run at once. */
  concurrency: number;
  /** Which limit sets the rate. */
  binding: BindingLimit;
  /** The pool's sustainable call rate under its limits, calls per minute. */
  callsPerMinute: number;
  /** Calls in flight at that rate (λ × latency). */
  callsInFlight: number;
  /** One attempt's call rate, calls per minute. */
  callsPerMinutePerAttempt: number;
  inputs: SizeFleetInput;
}

export function sizeFleet(input: SizeFleetInput): FleetSize {
  const { limits, observed } = input;
  const utilization = input.utilization ?? 0.95;
  const tpc = observed.tokensPerCall;
  const inTok = Math.max(0, typeof tpc === "number" ? tpc : tpc.inputTokens);
  const outTok = Math.max(0, typeof tpc === "number" ? tpc : tpc.outputTokens);
  const totalTok = typeof tpc === "number" ? Math.max(0, tpc) : inTok + outTok;
  const candidates: Array<[BindingLimit, number]> = [];
  const per = (limit: number | undefined, perCall: number) =>
    limit === undefined || limit <= 0 ? undefined : perCall <= 0 ? Number.POSITIVE_INFINITY : limit / perCall;
  const add = (name: BindingLimit, v: number | undefined) => {
    if (v !== undefined) candidates.push([name, v]);
  };
  add("requests", per(limits.requestsPerMinute, 1));
  add("inputTokens", per(limits.inputTokensPerMinute, inTok));
  add("outputTokens", per(limits.outputTokensPerMinute, outTok));
  add("tokens", per(limits.tokensPerMinute, totalTok));
  let binding: BindingLimit = "none";
  let callsPerMinute = Number.POSITIVE_INFINITY;
  for (const [name, v] of candidates) {
    if (v < callsPerMinute) {
      binding = name;
      callsPerMinute = v;
    }
  }
  callsPerMinute *= utilization;
  const latencyMs = Math.max(1, observed.callLatencyMs);
  const attemptMs = observed.attemptDurationMs;
  const callsPerMinutePerAttempt =
    attemptMs !== undefined && attemptMs > 0 && observed.callsPerAttempt > 0
      ? (observed.callsPerAttempt * 60_000) / attemptMs
      : 60_000 / latencyMs;
  const ceiling = Math.min(
    input.pendingAttempts ?? Number.POSITIVE_INFINITY,
    input.maxConcurrency ?? Number.POSITIVE_INFINITY,
  );
  let concurrency = Number.isFinite(callsPerMinute)
    ? Math.max(1, Math.floor(callsPerMinute / callsPerMinutePerAttempt))
    : Number.POSITIVE_INFINITY;
  concurrency = Math.min(concurrency, ceiling);
  if (!Number.isFinite(concurrency)) concurrency = 1; // no limit and no ceiling: the caller must bound it
  concurrency = Math.max(input.pendingAttempts === 0 ? 0 : 1, Math.floor(concurrency));
  return {
    concurrency,
    binding,
    callsPerMinute: Number.isFinite(callsPerMinute) ? Math.round(callsPerMinute) : -1,
    callsInFlight: Number.isFinite(callsPerMinute)
      ? Math.round((callsPerMinute / 60_000) * latencyMs * 100) / 100
      : -1,
    callsPerMinutePerAttempt: Math.round(callsPerMinutePerAttempt * 100) / 100,
    inputs: input,
  };
}

/** Mean tokens per call from the settle statistics a pool's owner checkpoints (FleetPacer.poolRecord().stats). */
export function tokensPerCallFromStats(stats: PoolStatsSnapshot): {
  inputTokens: number;
  outputTokens: number;
} {
  if (stats.settledCalls === 0) return { inputTokens: 0, outputTokens: 0 };
  return {
    inputTokens: Math.round(stats.inputTokens / stats.settledCalls),
    outputTokens: Math.round(stats.outputTokens / stats.settledCalls),
  };
}
