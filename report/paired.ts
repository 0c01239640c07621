import { clusterBootstrap, type Interval } from "./bootstrap.js";
import { pooledRate, type TaskTally } from "./stats.js";

/*
 * Paired statistics for two arms run on the same tasks. Pure. The task is the unit of resampling (repeats of one
 * task are correlated); McNemar's exact test pairs single attempts (same task, same repeat) and so reads best
 * without repeats — with them, the paired task bootstrap is the one to trust.
 */

/**
 * McNemar's exact test: of the discordant pairs, `b` went only to A and `c` only to B; under "no difference"
 * each discordant pair is a fair coin. Two-sided p = min(1, 2·P(X ≤ min(b, c))), X ~ Binomial(b + c, ½).
 */
export function mcnemarExact(b: number, c: number): number {
  if (!Number.isInteger(b) || !Number.isInteger(c) || b < 0 || c < 0)
    throw new RangeError(`mcnemarExact needs counts (b=${b}, c=${c})`);
  const n = b + c;
  if (n === 0) return 1;
  const k = Math.min(b, c);
  // Terms in logs: 2^-n underflows past n = 1074.
  let logTerm = -n * Math.LN2;
  let tail = Math.exp(logTerm);
  for (let i = 0; i < k; i++) {
    logTerm += Math.log((n - i) / (i + 1));
    tail += Math.exp(logTerm);
  }
  return Math.min(1, 2 * tail);
}

/** One task as both arms ran it: scored attempts and resolved ones per arm, and each arm's spend on it. */
export interface PairedTask {
  taskId: string;
  a: TaskTally;
  b: TaskTally;
  costA: number;
  costB: number;
}

/** The resolved-rate difference A − B (pooled over the paired tasks) and its paired task-bootstrap interval. */
export function pairedDifference(tasks: readonly PairedTask[]): {
  value: number | null;
  ci95: Interval | null;
} {
  const diff = (s: readonly PairedTask[]) => pooledRate(s.map((t) => t.a)) - pooledRate(s.map((t) => t.b));
  const value = diff(tasks);
  return { value: Number.isFinite(value) ? value : null, ci95: clusterBootstrap(tasks, diff) };
}

/** Spend per resolved attempt over the tasks (nano-USD), with its task-bootstrap interval; null when none resolved. */
export function costPerResolved(
  tasks: readonly PairedTask[],
  side: "a" | "b",
): { valueNanoUsd: number | null; ci95: Interval | null } {
  const ratio = (s: readonly PairedTask[]) => {
    let cost = 0;
    let resolved = 0;
    for (const t of s) {
      cost += side === "a" ? t.costA : t.costB;
      resolved += t[side].c;
    }
    return resolved === 0 ? (cost === 0 ? Number.NaN : Number.POSITIVE_INFINITY) : cost / resolved;
  };
  const v = ratio(tasks);
  if (!Number.isFinite(v)) return { valueNanoUsd: null, ci95: null };
  return { valueNanoUsd: Math.round(v), ci95: clusterBootstrap(tasks, ratio) };
}

/** Per task: A resolved a larger share of its repeats (win), a smaller one (loss), or the same (tie). */
export function winsLossesTies(tasks: readonly PairedTask[]): { wins: number; losses: number; ties: number } {
  let wins = 0;
  let losses = 0;
  for (const t of tasks) {
    // Cross-multiplied so unequal repeat counts compare exactly.
    const d = t.a.c * t.b.n - t.b.c * t.a.n;
    if (d > 0) wins++;
    else if (d < 0) losses++;
  }
  return { wins, losses, ties: tasks.length - wins - losses };
}
