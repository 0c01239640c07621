import type { z } from "zod";
import { ErrorCode, type Issue, ValidationError } from "./errors.js";
import { hasSecret, redactSecrets } from "./redact.js";

/** A path the way every issue shows it: `a.b[0].c`. */
export function issuePath(segments: ReadonlyArray<PropertyKey>): string {
  return segments.reduce<string>(
    (acc, seg) => (typeof seg === "number" ? `${acc}[${seg}]` : acc ? `${acc}.${String(seg)}` : String(seg)),
    "",
  );
}

/** Turn zod's issues into evalfleet's: a dotted path (with [i] for indexes) and a reason. */
export function zodIssues(error: z.ZodError): Issue[] {
  return error.issues.map((i) => ({ path: issuePath(i.path), reason: i.message }));
}

/** Nesting a config or task file may have: far more than any needs, far less than what overflows a stack. */
export const MAX_NESTING = 32;

/**
 * Problems with a parsed YAML / JSON document that a schema cannot see, each with its path: nesting deeper than
 * `maxDepth` (or a YAML alias that refers to itself), values JSON cannot carry unchanged (YAML `!!set`, `!!binary`,
 * `.inf`), and with `secrets`, strings that look like API keys or tokens. Stored documents go through
 * JSON.stringify, which would throw on the first two; the third must never be stored at all. Iterative, so it
 * cannot overflow the stack itself; reports at most `limit` problems.
 */
export function documentIssues(
  value: unknown,
  opts: { maxDepth?: number; secrets?: boolean; limit?: number } = {},
): Issue[] {
  const maxDepth = opts.maxDepth ?? MAX_NESTING;
  const limit = opts.limit ?? 20;
  const found: Array<{ path: PropertyKey[]; reason: string }> = [];
  const secret = (what: string) =>
    `${what} looks like a secret (an API key or token); remove it: run configs are stored in PostgreSQL and NATS, and the shim adds the run's own key to every model call`;
  const stack: Array<{ v: unknown; path: PropertyKey[] }> = [{ v: value, path: [] }];
  while (stack.length > 0 && found.length < limit) {
    const { v, path } = stack.pop()!;
    if (typeof v === "string") {
      if (opts.secrets && hasSecret(v)) found.push({ path, reason: secret("this value") });
    } else if (typeof v === "number") {
      if (!Number.isFinite(v)) found.push({ path, reason: `${v} is not a finite number` });
    } else if (v === null || typeof v !== "object") {
      // booleans; JSON and YAML yield nothing else
    } else if (path.length >= maxDepth) {
      found.push({
        path,
        reason: `nested more than ${maxDepth} levels deep (or a YAML alias refers to itself); flatten it`,
      });
    } else if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push({ v: v[i], path: [...path, i] });
    } else if (![Object.prototype, null].includes(Object.getPrototypeOf(v))) {
      const kind = (v as object).constructor?.name ?? "object";
      found.push({
        path,
        reason: `is a ${kind} (a YAML tag?); use only mappings, lists, strings, numbers and booleans`,
      });
    } else {
      const entries = Object.entries(v);
      for (let i = entries.length - 1; i >= 0; i--) {
        const [k, x] = entries[i]!;
        if (opts.secrets && hasSecret(k)) found.push({ path: [...path, k], reason: secret("this key") });
        stack.push({ v: x, path: [...path, k] });
      }
    }
  }
  // A path may hold a secret key itself: never echo it.
  return found.slice(0, limit).map((f) => ({ path: redactSecrets(issuePath(f.path)), reason: f.reason }));
}

/** Validate `value` against `schema`, or throw a ValidationError listing every problem. */
export function validate<S extends z.ZodType>(
  schema: S,
  value: unknown,
  what: string,
  code: (typeof ErrorCode)[keyof typeof ErrorCode] = ErrorCode.InvalidMessage,
): z.output<S> {
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const issues = zodIssues(r.error);
  throw new ValidationError(
    code,
    `${what} is invalid (${issues.length} problem${issues.length === 1 ? "" : "s"})`,
    issues,
  );
}

const decoder = new TextDecoder("utf-8", { fatal: true });

/** Decode a JSON message body and validate it. Decode = validate: nothing is ever cast. */
export function decodeJson<S extends z.ZodType>(schema: S, data: Uint8Array, what: string): z.output<S> {
  let value: unknown;
  try {
    value = JSON.parse(decoder.decode(data));
  } catch (err) {
    throw new ValidationError(ErrorCode.InvalidMessage, `${what} is not valid UTF-8 JSON`, [
      { path: "", reason: err instanceof Error ? err.message : String(err) },
    ]);
  }
  return validate(schema, value, what);
}

const encoder = new TextEncoder();

/** Encode a message after validating it, so a bug never puts a malformed message on the wire. */
export function encodeJson<S extends z.ZodType>(schema: S, value: z.input<S>, what: string): Uint8Array {
  return encoder.encode(JSON.stringify(validate(schema, value, what)));
}
