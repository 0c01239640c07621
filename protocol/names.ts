/**
 * Names that come from users (run names, harness / model / task ids, cell ids) end up inside NATS subjects, KV keys,
 * object names, workdir paths and container names. Each of those has its own alphabet, so a name is never used raw:
 * it is validated where it enters (the run config) and encoded where it becomes a token.
 */

import { ErrorCode, EvalfleetError } from "./errors.js";

const TOKEN_SAFE = /^[A-Za-z0-9_-]$/;

/**
 * Encode one name as a single subject token / KV key segment. Characters outside `[A-Za-z0-9_-]` become `=XX`
 * (UTF-8 bytes in upper-case hex), which is reversible, keeps `.`, `*`, `>`, spaces and control characters out of
 * subjects, and uses only characters NATS KV keys allow.
 */
export function encodeToken(name: string): string {
  let out = "";
  for (const ch of name) {
    if (TOKEN_SAFE.test(ch)) out += ch;
    else
      for (const byte of Buffer.from(ch, "utf8"))
        out += `=${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  if (out.length === 0)
    throw new EvalfleetError(ErrorCode.InvalidMessage, "cannot encode an empty name as a token");
  return out;
}

/**
 * An attempt number as one token / path segment: `1.5`, `-1` or `NaN` would split or bend a subject, a key, an
 * object name or a folder.
 */
export function attemptToken(attempt: number): string {
  if (!Number.isSafeInteger(attempt) || attempt < 0)
    throw new EvalfleetError(ErrorCode.InvalidMessage, `attempt ${attempt} is not a non-negative integer`);
  return String(attempt);
}

/** Inverse of encodeToken. */
export function decodeToken(token: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < token.length; i++) {
    const c = token[i]!;
    if (c === "=") {
      bytes.push(Number.parseInt(token.slice(i + 1, i + 3), 16));
      i += 2;
    } else bytes.push(c.charCodeAt(0));
  }
  return Buffer.from(bytes).toString("utf8");
}

/**
 * The alphabet accepted for names in a run config and task library: letters, digits, `_ - .` and `:` `@` `+`
 * (model ids use them), not starting with `.` or `-`, at most 128 characters, no `..`.
 */
export const NAME_PATTERN = /^(?![.-])(?!.*\.\.)[A-Za-z0-9_.:@+-]{1,128}$/;

/** Why a name is not acceptable, or undefined when it is. */
export function nameProblem(name: string): string | undefined {
  if (name.length === 0) return "must not be empty";
  if (name.length > 128) return `is ${name.length} characters long; the limit is 128`;
  // Names key plain objects all over (prices, aliases, report groups): `__proto__` would set a prototype.
  if (name in Object.prototype) return "is reserved (a JavaScript object property name); choose another";
  if (NAME_PATTERN.test(name)) return undefined;
  if (name.includes("..")) return "must not contain '..'";
  if (/^[.-]/.test(name)) return "must not start with '.' or '-'";
  const bad = [...name].find((c) => !/[A-Za-z0-9_.:@+-]/.test(c)) ?? "";
  const shown = /[\x00-\x1f\x7f]/.test(bad) ? `\\x${bad.charCodeAt(0).toString(16).padStart(2, "0")}` : bad;
  return `contains '${shown}'; use only letters, digits and _ . : @ + -`;
}

/**
 * A filesystem- and container-safe slug for a cell id: `[a-z0-9_.-]`, no leading dot or dash, bounded length, with
 * a short hash suffix when anything had to change so two different ids never collide.
 */
export function safeSlug(name: string, maxLength = 120): string {
  const cleaned = name
    .replace(/[^A-Za-z0-9_.-]/g, "_")
    .replace(/\.{2,}/g, "_")
    .replace(/^[.-]+/, "_");
  if (cleaned.length > 0 && cleaned === name && cleaned.length <= maxLength) return cleaned;
  const hash = fnv1a(name).toString(16).padStart(8, "0");
  // Never empty (it would collapse a folder level) and never starting with `-` (an option to a CLI).
  return `${cleaned.slice(0, maxLength - 9) || "_"}-${hash}`;
}

function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (const byte of Buffer.from(s, "utf8")) {
    h ^= byte;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}
