/**
 * Reading and changing a few top-level members of a JSON request body without parsing or re-serialising the rest.
 * The shim and the gateway both sit in the path of every model call, whose body is mostly conversation.
 */

/** A top-level member: its parsed value and where the value's bytes are. */
export interface JsonMember {
  value: unknown;
  start: number;
  end: number;
}

export interface JsonMembers {
  raw: Buffer;
  /** just past the opening brace: where a new member goes */
  open: number;
  /** how many members the object has */
  count: number;
  /** the members read, by name */
  members: Map<string, JsonMember>;
}

// JSON's structural bytes
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;

function isSpace(c: number | undefined): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

function skipSpace(b: Buffer, i: number): number {
  while (isSpace(b[i])) i++;
  return i;
}

/** From an opening quote to just past its closing quote, or -1. Strings are most of a request: memchr, not a loop. */
function skipString(b: Buffer, i: number): number {
  for (let q = i; ; ) {
    q = b.indexOf(QUOTE, q + 1);
    if (q < 0) return -1;
    let k = q - 1;
    while (b[k] === BACKSLASH) k--;
    if ((q - 1 - k) % 2 === 0) return q + 1;
  }
}

/** From the first byte of a value to just past it, or -1 when the structure is broken. */
function skipValue(b: Buffer, i: number): number {
  const c = b[i];
  if (c === QUOTE) return skipString(b, i);
  if (c === OPEN_BRACE || c === OPEN_BRACKET) {
    let depth = 0;
    while (i < b.length) {
      const d = b[i]!;
      if (d === QUOTE) {
        i = skipString(b, i);
        if (i < 0) return -1;
        continue;
      }
      if (d === OPEN_BRACE || d === OPEN_BRACKET) depth++;
      else if (d === CLOSE_BRACE || d === CLOSE_BRACKET) {
        depth--;
        if (depth === 0) return i + 1;
      }
      i++;
    }
    return -1;
  }
  // number, true, false, null: up to the next delimiter
  const from = i;
  while (i < b.length && !isSpace(b[i]) && b[i] !== COMMA && b[i] !== CLOSE_BRACE && b[i] !== CLOSE_BRACKET)
    i++;
  return i > from ? i : -1;
}

/**
 * The top-level members named in `read`, without parsing the rest: a coding agent's request is tens to hundreds of
 * KB of conversation, and decoding it to a string and parsing it cost about a millisecond per call. Strings are
 * skipped with indexOf. Returns a message when the body is not a JSON object. Bytes inside skipped values are not
 * validated: the provider rejects those, unbilled. A repeated member reads as its last occurrence, as JSON.parse and
 * the providers read it.
 */
export function readMembers(b: Buffer, read: ReadonlySet<string>): JsonMembers | string {
  // A member name may be written with \uXXXX escapes: six bytes a character, plus the quotes.
  let longest = 0;
  for (const name of read) longest = Math.max(longest, name.length);
  const maxKeyBytes = longest * 6 + 2;
  const broken = "request body is not valid JSON";
  const members = new Map<string, JsonMember>();
  let i = skipSpace(b, 0);
  if (i >= b.length) return "request body is empty";
  if (b[i] !== OPEN_BRACE) return "request body must be a JSON object";
  const open = i + 1;
  i = skipSpace(b, open);
  if (b[i] === CLOSE_BRACE)
    return skipSpace(b, i + 1) === b.length ? { raw: b, open, count: 0, members } : broken;
  for (let count = 1; ; count++) {
    if (b[i] !== QUOTE) return broken;
    const keyStart = i;
    const keyEnd = skipString(b, keyStart);
    if (keyEnd < 0) return broken;
    i = skipSpace(b, keyEnd);
    if (b[i] !== COLON) return broken;
    const start = skipSpace(b, i + 1);
    const end = skipValue(b, start);
    if (end < 0) return broken;
    // Only a name that could be one we read is decoded (escapes and all).
    if (keyEnd - keyStart <= maxKeyBytes) {
      const key = parseSlice(b, keyStart, keyEnd);
      if (typeof key === "string" && read.has(key)) {
        const value = parseSlice(b, start, end);
        if (value === BROKEN) return broken;
        members.set(key, { value, start, end });
      } else if (key === BROKEN) return broken;
    }
    i = skipSpace(b, end);
    if (b[i] === COMMA) {
      i = skipSpace(b, i + 1);
      continue;
    }
    if (b[i] === CLOSE_BRACE && skipSpace(b, i + 1) === b.length) return { raw: b, open, count, members };
    return broken;
  }
}

const BROKEN = Symbol("broken");

function parseSlice(b: Buffer, start: number, end: number): unknown {
  try {
    return JSON.parse(b.toString("utf8", start, end));
  } catch {
    return BROKEN;
  }
}

/**
 * The body with members set: a member present has the value of its last occurrence replaced, one absent is added
 * first. The rest of the bytes are the client's own.
 */
export function withMembers(body: JsonMembers, set: ReadonlyMap<string, unknown>): Buffer {
  if (set.size === 0) return body.raw;
  const edits: Array<{ start: number; end: number; text: string }> = [];
  const added: string[] = [];
  for (const [name, value] of set) {
    const at = body.members.get(name);
    if (at) edits.push({ start: at.start, end: at.end, text: JSON.stringify(value) });
    else added.push(`${JSON.stringify(name)}:${JSON.stringify(value)}`);
  }
  if (added.length > 0)
    edits.push({ start: body.open, end: body.open, text: added.join(",") + (body.count > 0 ? "," : "") });
  edits.sort((a, b) => a.start - b.start);
  const parts: Buffer[] = [];
  let at = 0;
  for (const e of edits) {
    parts.push(body.raw.subarray(at, e.start), Buffer.from(e.text, "utf8"));
    at = e.end;
  }
  parts.push(body.raw.subarray(at));
  return Buffer.concat(parts);
}
