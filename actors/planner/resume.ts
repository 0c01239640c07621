import type { RunConfig } from "../../protocol/config.js";
import type { Issue } from "../../protocol/errors.js";

/**
 * Resubmitting a run's name resumes that run: its completed cells keep their results and only the rest run. That
 * is only the same run if the config is the same, so a resubmission may change nothing but how much it may spend
 * and how many attempts run at once. Anything else (a model's prices, a harness version, the caps, the tasks…)
 * would mix results from two configs under one name.
 */
export const RESUME_MAY_CHANGE: ReadonlySet<keyof RunConfig> = new Set(["budget_usd", "parallel_runs"]);

const MAX_SHOWN = 80;

function show(v: unknown): string {
  if (v === undefined) return "(not set)";
  const s = JSON.stringify(v);
  return s.length > MAX_SHOWN ? `${s.slice(0, MAX_SHOWN - 1)}…` : s;
}

/** Every place two JSON values differ, as `path: stored → submitted`. Arrays compare by index. */
function differences(stored: unknown, submitted: unknown, path: string, out: Issue[]): void {
  if (stored === submitted) return;
  const bothObjects =
    stored !== null && submitted !== null && typeof stored === "object" && typeof submitted === "object";
  if (bothObjects && Array.isArray(stored) === Array.isArray(submitted)) {
    if (Array.isArray(stored) && Array.isArray(submitted)) {
      const n = Math.max(stored.length, submitted.length);
      for (let i = 0; i < n; i++) differences(stored[i], submitted[i], `${path}[${i}]`, out);
      return;
    }
    const a = stored as Record<string, unknown>;
    const b = submitted as Record<string, unknown>;
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    for (const k of keys) differences(a[k], b[k], path ? `${path}.${k}` : k, out);
    return;
  }
  out.push({ path, reason: `stored ${show(stored)}, submitted ${show(submitted)}` });
}

/** How a resubmission differs from the run's stored config, outside the fields a resume may change. */
export function resumeConflicts(stored: RunConfig, submitted: RunConfig): Issue[] {
  const out: Issue[] = [];
  const strip = (c: RunConfig) =>
    Object.fromEntries(Object.entries(c).filter(([k]) => !RESUME_MAY_CHANGE.has(k as keyof RunConfig)));
  // Through JSON, so a field stored as undefined and one left out are the same.
  differences(
    JSON.parse(JSON.stringify(strip(stored))),
    JSON.parse(JSON.stringify(strip(submitted))),
    "",
    out,
  );
  return out;
}
