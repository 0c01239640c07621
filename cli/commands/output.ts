/** Small helpers for what commands print. */

/** Print one JSON value on one line. */
export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}
