/**
 * Polls `probe` every 50 ms until it gives something other than undefined or false, and returns that; fails after
 * `ms` naming what it waited for.
 */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined | false>,
  ms = 30_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
