/**
 * fast-check arbitraries for hostile input: values a submitter or a task file may hold (prototype keys, huge
 * strings, deep nesting, control characters, secrets), names built to break subjects and paths, and mutations of
 * a valid document. Shared by the property tests of run submissions, task specs and names.
 */
import fc from "fast-check";

/** Distinctive secrets of every shape evalfleet must never store (fixtures, not real keys). */
export const PLANTED_SECRETS = [
  "sk-ant-api03-PLANTEDabcdefghijklmnopqrstuvwxyz0123",
  "sk-proj-PLANTEDabcdefghijklmnopqrstuv",
  "efk-PLANTED0123456789abcdefghijklmnopqrstuvw",
  "AKIAPLANTED0EXAMPLE1",
  `SU${"APLANTEDSEED".padEnd(56, "A")}`,
] as const;

/** Keys that mean something to JavaScript objects. */
export const PROTO_KEYS = ["__proto__", "constructor", "prototype", "toString", "hasOwnProperty", "valueOf"];

/** Strings that try to climb folders, split subjects, widen wildcards or end a line. */
export const HOSTILE_STRINGS = [
  "",
  ".",
  "..",
  "../..",
  "../../etc/passwd",
  "/etc/passwd",
  "a/b",
  "a\\b",
  "*",
  ">",
  "a.>",
  "a.*.b",
  "a b",
  " ",
  "\t",
  "x\ny",
  "x\r\n",
  "\u0000",
  "a\u0000b",
  "\u001b[31m",
  "ünï/cødé",
  "😀",
  "\u202e",
  "-rf",
  "--upload-pack=touch /tmp/pwned",
  "$(id)",
  "`id`",
  "'; DROP TABLE run_results; --",
  "=2E",
  "x".repeat(129),
  "y".repeat(5000),
  ...PROTO_KEYS,
  ...PLANTED_SECRETS,
];

/** Any string a person or a program could send, weighted towards the hostile ones. */
export function hostileString(): fc.Arbitrary<string> {
  return fc.oneof(
    { weight: 3, arbitrary: fc.constantFrom(...HOSTILE_STRINGS) },
    { weight: 2, arbitrary: fc.string({ unit: "binary", maxLength: 40 }) },
    { weight: 1, arbitrary: fc.string({ unit: "grapheme", maxLength: 20 }) },
    {
      weight: 1,
      arbitrary: fc
        .tuple(fc.constantFrom(...HOSTILE_STRINGS), fc.string({ maxLength: 8 }))
        .map(([a, b]) => a + b),
    },
  );
}

/** A JSON value with hostile strings and keys, sometimes very deep. */
export function hostileValue(): fc.Arbitrary<unknown> {
  const { value } = fc.letrec((tie) => ({
    value: fc.oneof(
      { depthSize: "small", withCrossShrink: true },
      fc.constant(null),
      fc.boolean(),
      fc.integer(),
      fc.double(),
      hostileString(),
      fc.array(tie("value"), { maxLength: 4 }),
      fc.dictionary(fc.oneof(hostileString(), fc.constantFrom(...PROTO_KEYS)), tie("value"), { maxKeys: 4 }),
    ),
  }));
  return fc.oneof(
    { weight: 6, arbitrary: value },
    { weight: 1, arbitrary: fc.integer({ min: 20, max: 300 }).map((n) => nest(n)) },
  );
}

/** `n` levels of lists around a string, built without recursion. */
export function nest(n: number): unknown {
  let v: unknown = "bottom";
  for (let i = 0; i < n; i++) v = i % 2 ? [v] : { x: v };
  return v;
}

/** Every path to a value inside `doc` (objects and arrays), the root included. */
function paths(doc: unknown, prefix: PropertyKey[] = []): PropertyKey[][] {
  const out: PropertyKey[][] = [prefix];
  if (prefix.length > 6 || doc === null || typeof doc !== "object") return out;
  for (const [k, v] of Object.entries(doc))
    out.push(...paths(v, [...prefix, Array.isArray(doc) ? Number(k) : k]));
  return out;
}

/** A deep copy with `value` set at `path` (creating own properties, even `__proto__`), or the key deleted. */
function setAt(doc: unknown, path: PropertyKey[], value: unknown, remove: boolean): unknown {
  if (path.length === 0) return remove ? undefined : value;
  const copy = (
    Array.isArray(doc) ? [...doc] : doc !== null && typeof doc === "object" ? { ...doc } : {}
  ) as Record<PropertyKey, unknown>;
  const [head, ...rest] = path as [PropertyKey, ...PropertyKey[]];
  if (rest.length === 0 && remove) delete copy[head];
  else
    Object.defineProperty(copy, head, {
      value: setAt(copy[head], rest, value, remove),
      enumerable: true,
      writable: true,
      configurable: true,
    });
  return copy;
}

/** A valid document changed in one to three places: a value replaced, a key deleted, a key added. */
export function mutated(valid: unknown): fc.Arbitrary<unknown> {
  const all = paths(valid);
  const one = fc.oneof(
    fc.record({ kind: fc.constant("set" as const), path: fc.constantFrom(...all), value: hostileValue() }),
    fc.record({
      kind: fc.constant("delete" as const),
      path: fc.constantFrom(...all.filter((p) => p.length > 0)),
    }),
    fc.record({
      kind: fc.constant("add" as const),
      path: fc.constantFrom(...all),
      key: fc.oneof(fc.constantFrom(...PROTO_KEYS), hostileString()),
      value: hostileValue(),
    }),
  );
  return fc.array(one, { minLength: 1, maxLength: 3 }).map((ms) => {
    let doc = valid;
    for (const m of ms) {
      if (m.kind === "set") doc = setAt(doc, m.path, m.value, false);
      else if (m.kind === "delete") doc = setAt(doc, m.path, undefined, true);
      else doc = setAt(doc, [...m.path, m.key], m.value, false);
    }
    return doc;
  });
}
