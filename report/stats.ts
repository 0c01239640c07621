/** Estimators the report uses. Pure functions, no I/O. */

/** z for a two-sided 95% interval. */
export const Z95 = 1.959963984540054;

/**
 * The unbiased pass@k estimator (Chen et al. 2021): the probability that at least one of k samples drawn without
 * replacement from n attempts, c of them correct, is correct: 1 - C(n-c, k) / C(n, k). Computed as a running
 * product so large n never overflows. Undefined (NaN) when k > n: there are not k attempts to draw.
 */
export function passAtK(n: number, c: number, k: number): number {
  if (
    !Number.isInteger(n) ||
    !Number.isInteger(c) ||
    !Number.isInteger(k) ||
    n < 0 ||
    c < 0 ||
    c > n ||
    k < 1
  )
    throw new RangeError(`passAtK needs integers 0 <= c <= n and k >= 1 (n=${n}, c=${c}, k=${k})`);
  if (k > n) return Number.NaN;
  if (n - c < k) return 1;
  if (c === 0) return 0;
  // k = 1 is the plain success fraction; computed directly so it is exact.
  if (k === 1) return c / n;
  let notAll = 1;
  for (let i = n - c + 1; i <= n; i++) notAll *= 1 - k / i;
  return 1 - notAll;
}

/** Mean pass@k over tasks; tasks with fewer than k attempts are left out (and counted in `excluded`). */
export function meanPassAtK(
  tasks: Iterable<{ n: number; c: number }>,
  k: number,
): { value: number | null; tasks: number; excluded: number } {
  let sum = 0;
  let used = 0;
  let excluded = 0;
  for (const t of tasks) {
    if (t.n < k) {
      excluded++;
      continue;
    }
    sum += passAtK(t.n, t.c, k);
    used++;
  }
  return { value: used === 0 ? null : sum / used, tasks: used, excluded };
}

/** 95% Wilson score interval for `successes` out of `trials`; null when there are no trials. */
export function wilson(successes: number, trials: number, z = Z95): { low: number; high: number } | null {
  if (trials <= 0) return null;
  if (successes < 0 || successes > trials) throw new RangeError(`wilson: ${successes} of ${trials}`);
  const p = successes / trials;
  const z2 = z * z;
  const denom = 1 + z2 / trials;
  const centre = (p + z2 / (2 * trials)) / denom;
  const half = (z / denom) * Math.sqrt((p * (1 - p)) / trials + z2 / (4 * trials * trials));
  // At p = 0 or 1 the bound is exactly 0 / 1 in exact arithmetic; floats leave dust there.
  return {
    low: successes === 0 ? 0 : Math.max(0, centre - half),
    high: successes === trials ? 1 : Math.min(1, centre + half),
  };
}

/** Median of the finite numbers given (mean of the middle two for an even count); null when there are none. */
export function median(values: Iterable<number | null | undefined>): number | null {
  const xs: number[] = [];
  for (const v of values) if (typeof v === "number" && Number.isFinite(v)) xs.push(v);
  if (xs.length === 0) return null;
  xs.sort((a, b) => a - b);
  const mid = xs.length >> 1;
  return xs.length % 2 === 1 ? xs[mid]! : (xs[mid - 1]! + xs[mid]!) / 2;
}

/**
 * pass^k (Yao et al. 2024, τ-bench): the probability that k samples drawn without replacement from n attempts, c
 * of them correct, are all correct: C(c, k) / C(n, k). The reliability counterpart of pass@k. NaN when k > n.
 */
export function passHatK(n: number, c: number, k: number): number {
  if (!Number.isInteger(n) || !Number.isInteger(c) || !Number.isInteger(k) || c < 0 || c > n || k < 1)
    throw new RangeError(`passHatK needs integers 0 <= c <= n and k >= 1 (n=${n}, c=${c}, k=${k})`);
  if (k > n) return Number.NaN;
  if (c < k) return 0;
  let all = 1;
  for (let i = 0; i < k; i++) all *= (c - i) / (n - i);
  return all;
}

/** One task's scored attempts in one group: n scored, c resolved. */
export interface TaskTally {
  n: number;
  c: number;
}

/** Resolved over scored, pooled over tasks; NaN when nothing is scored. */
export function pooledRate(tasks: readonly TaskTally[]): number {
  let n = 0;
  let c = 0;
  for (const t of tasks) {
    n += t.n;
    c += t.c;
  }
  return n === 0 ? Number.NaN : c / n;
}

/** Mean of a per-task estimator over the tasks with at least k attempts; NaN when none has. */
export function meanOverTasks(
  tasks: readonly TaskTally[],
  k: number,
  f: (n: number, c: number, k: number) => number,
): number {
  let sum = 0;
  let used = 0;
  for (const t of tasks)
    if (t.n >= k) {
      sum += f(t.n, t.c, k);
      used++;
    }
  return used === 0 ? Number.NaN : sum / used;
}

/**
 * How often repeats of a task disagree: for each task with two or more scored repeats, the probability that two
 * of its repeats drawn without replacement differ (2c(n-c) / (n(n-1))), averaged over those tasks; and how many
 * of them had both outcomes at least once.
 */
export function flipRate(tasks: readonly TaskTally[]): {
  rate: number | null;
  mixedTasks: number;
  tasksWithRepeats: number;
} {
  let sum = 0;
  let used = 0;
  let mixed = 0;
  for (const t of tasks) {
    if (t.n < 2) continue;
    used++;
    sum += (2 * t.c * (t.n - t.c)) / (t.n * (t.n - 1));
    if (t.c > 0 && t.c < t.n) mixed++;
  }
  return { rate: used === 0 ? null : sum / used, mixedTasks: mixed, tasksWithRepeats: used };
}
