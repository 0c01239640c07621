import path from "node:path";
import { fileURLToPath } from "node:url";

/**
 * Whether this process runs evalfleet from its TypeScript sources (through tsx: a checkout, `npm start`, the tests)
 * or from the compiled JavaScript in `dist/` (`npm run build`: what the images carry, where tsx is not installed).
 */
export const FROM_SOURCE = import.meta.url.endsWith(".ts");

/** The folder holding protocol/, cli/, … : the checkout from source, `dist/` (or an image's app folder) compiled. */
export const CODE_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

/** A module of evalfleet's own (path without extension, from the code root) as a file of the form running now. */
export function ownModule(...segments: string[]): string {
  return `${path.join(CODE_ROOT, ...segments)}${FROM_SOURCE ? ".ts" : ".js"}`;
}

/** The argv that runs the evalfleet CLI as a child process of this one, in the same form (source or compiled). */
export function cliCommand(): string[] {
  return FROM_SOURCE
    ? [process.execPath, path.join(CODE_ROOT, "bin", "evalfleet.js")]
    : [process.execPath, ownModule("cli", "main")];
}
