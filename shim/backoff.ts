/**
 * How long the provider asked to be left alone (retry-after-ms, or retry-after in seconds or as an HTTP date),
 * at most `maxMs`; undefined when it did not say.
 */
export function retryAfterMs(
  headers: Record<string, string | string[] | undefined>,
  maxMs: number,
): number | undefined {
  const ms = header(headers, "retry-after-ms");
  if (ms !== undefined) {
    const v = Number(ms);
    if (Number.isFinite(v) && v >= 0) return Math.min(v, maxMs);
  }
  const ra = header(headers, "retry-after");
  if (ra !== undefined) {
    const secs = Number(ra);
    if (Number.isFinite(secs) && secs >= 0) return Math.min(secs * 1000, maxMs);
    const at = Date.parse(ra);
    if (Number.isFinite(at)) return Math.min(Math.max(0, at - Date.now()), maxMs);
  }
  return undefined;
}

function header(h: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
}
