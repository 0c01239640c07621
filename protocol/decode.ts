import type { z } from "zod";
import { ErrorCode, type Issue, ValidationError } from "./errors.js";

/** Turn zod's issues into evalfleet's: a dotted path (with [i] for indexes) and a reason. */
export function zodIssues(error: z.ZodError): Issue[] {
  return error.issues.map((i) => ({
    path: i.path.reduce<string>(
      (acc, seg) =>
        typeof seg === "number" ? `${acc}[${seg}]` : acc ? `${acc}.${String(seg)}` : String(seg),
      "",
    ),
    reason: i.message,
  }));
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
