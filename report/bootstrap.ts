/*
 * Task-clustered bootstrap: repeats of one task are not independent (the same task is easy or hard for every
 * repeat), so intervals resample whole tasks with replacement and recompute the statistic over each resample.
 * Seeded, so the same rows give the same interval on every run of the report.
 */

/** Resamples per interval; 2,000 keeps the 2.5th / 97.5th percentiles stable to about a percentage point. */
export const BOOTSTRAP_RESAMPLES = 2_000;
/** The default seed: reports are reproducible byte for byte. */
export const BOOTSTRAP_SEED = 0x5eed_18;

/** A small, fast, seeded PRNG (mulberry32): uniform floats in [0, 1). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

/** The q-quantile (0..1) of sorted finite values, linearly interpolated. */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  const pos = (sorted.length - 1) * q;
  const lo = sorted[Math.floor(pos)]!;
  const hi = sorted[Math.ceil(pos)]!;
  // Equal neighbours (infinite ones too) need no interpolation, which would make Infinity − Infinity NaN.
  return lo === hi ? lo : lo + (hi - lo) * (pos - Math.floor(pos));
}

/** A 95% interval; `high` is null when the statistic is unbounded in over 2.5% of resamples (cost per resolved). */
export interface Interval {
  low: number;
  high: number | null;
}

/**
 * The percentile 95% interval of `stat` over `resamples` resamples of `units` (tasks) drawn with replacement.
 * A resample whose statistic is NaN (undefined for it) is left out; +Infinity sorts last (unbounded above).
 * Null when there are no units.
 */
export function clusterBootstrap<T>(
  units: readonly T[],
  stat: (sample: readonly T[]) => number,
  opts: { resamples?: number; seed?: number } = {},
): Interval | null {
  if (units.length === 0) return null;
  const rand = seededRandom(opts.seed ?? BOOTSTRAP_SEED);
  const b = opts.resamples ?? BOOTSTRAP_RESAMPLES;
  const values: number[] = [];
  const sample: T[] = new Array(units.length);
  for (let i = 0; i < b; i++) {
    for (let j = 0; j < units.length; j++) sample[j] = units[Math.floor(rand() * units.length)]!;
    const v = stat(sample);
    if (!Number.isNaN(v)) values.push(v);
  }
  if (values.length === 0) return null;
  values.sort((x, y) => x - y);
  const low = quantile(values, 0.025);
  const high = quantile(values, 0.975);
  if (!Number.isFinite(low)) return null;
  return { low, high: Number.isFinite(high) ? high : null };
}
