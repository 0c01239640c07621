/**
 * Python string and `re` semantics the official harness relies on, rebuilt for JS.
 *
 * The official parsers are Python. Identical verdicts need identical tokenisation, and JS differs in
 * small ways that matter on real logs: Python's `str.split()`/`strip()` treat \x1c-\x1f and \x85 as
 * whitespace, Python's `\s`/`\d`/`\w` are Unicode-aware, `.` excludes only "\n", and MULTILINE `^`/`$`
 * only see "\n" (JS also breaks at \r, \u2028, \u2029). Every parser builds its regexes from these pieces.
 */

/** Characters for which Python's `str.isspace()` is true. */
const PY_WS_CHARS =
  "\\t\\n\\v\\f\\r\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

/** Python `\s`. */
export const S = `[${PY_WS_CHARS}]`;
/** Python `\S`. */
export const NS = `[^${PY_WS_CHARS}]`;
/** Python `\s` minus \r and \n — the official `[^\S\r\n]`. */
export const S_NO_NL = `[\\t\\v\\f\\x1c-\\x1f \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]`;
/** Python `\d` (Unicode decimal digits). */
export const D = "\\p{Nd}";
/** Python `\w` (str.isalnum() or underscore). */
export const W = "[\\p{L}\\p{N}_]";
/** Python `.` without DOTALL. */
export const DOT = "[^\\n]";
/** Python `^` under re.MULTILINE. */
export const BOL = "(?<![^\\n])";
/** Python `$` under re.MULTILINE. */
export const EOL = "(?![^\\n])";
/** Python `\b` after a word character. */
export const WB_AFTER_WORD = "(?![\\p{L}\\p{N}_])";

/** Compile with Unicode semantics (code points, \p classes); callers pass extra flags like "g". */
export function re(source: string, flags = ""): RegExp {
  return new RegExp(source, `u${flags}`);
}

const WS_RUN = re(`${S}+`);
const LEADING_WS = re(`^${S}+`);
const TRAILING_WS = re(`${S}+$`);

/** Python `str.split()` with no arguments. */
export function pySplit(s: string): string[] {
  return s.split(WS_RUN).filter((t) => t.length > 0);
}

/** Python `str.strip()` with no arguments. */
export function pyStrip(s: string): string {
  return pyRstrip(pyLstrip(s));
}

/** Python `str.lstrip()` with no arguments. */
export function pyLstrip(s: string): string {
  return s.replace(LEADING_WS, "");
}

/** Python `str.rstrip()` with no arguments. */
export function pyRstrip(s: string): string {
  return s.replace(TRAILING_WS, "");
}

/** Python `len(s) - len(s.lstrip())`; leading whitespace is all BMP, so UTF-16 length is exact. */
export function indentOf(s: string): number {
  return s.length - pyLstrip(s).length;
}

/**
 * Python reads logs with `open(path)`, i.e. universal newlines: "\r\n" and a lone "\r" both become "\n".
 * Progress bars in real logs (sphinx, tox) use bare \r, so this changes which lines parsers see.
 */
export function universalNewlines(text: string): string {
  return text.replace(/\r\n?/g, "\n");
}

/** Python `str.startswith` for any of several prefixes. */
export function startsWithAny(s: string, prefixes: readonly string[]): boolean {
  return prefixes.some((p) => s.startsWith(p));
}

/** Python `str.endswith` for any of several suffixes. */
export function endsWithAny(s: string, suffixes: readonly string[]): boolean {
  return suffixes.some((p) => s.endsWith(p));
}

/** Python `s.rsplit(sep, 1)[0]`. */
export function rsplitFirst(s: string, sep: string): string {
  const i = s.lastIndexOf(sep);
  return i === -1 ? s : s.slice(0, i);
}

/** Remove ANSI escape sequences exactly as swebench `utils.ansi_escape` does. */
export function ansiEscape(text: string): string {
  // The official class `[@-Z\\-_]` is @..Z plus \\..\_ : "[" (0x5b) is deliberately not in it.
  return text.replace(/\x1b(?:[\x40-\x5a\x5c-\x5f]|\[[0-?]*[ -/]*[@-~])/g, "");
}

/**
 * An IndexError/AttributeError inside an official parser. The harness then records the instance as an
 * error (no report), so we surface it instead of guessing a status map.
 */
export class ParserCrash extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ParserCrash";
  }
}

/** Python `list[i]` that raises IndexError instead of yielding undefined. */
export function at<T>(list: readonly T[], i: number, what: string): T {
  const v = i < 0 ? list[list.length + i] : list[i];
  if (v === undefined) throw new ParserCrash(`IndexError: ${what}`);
  return v;
}

/** Python `json.dumps(value, indent=4)` (ensure_ascii on), byte for byte — how report.json is written. */
export function pyJsonDumps(value: unknown, indent = 4, level = 0): string {
  const pad = " ".repeat(indent * (level + 1));
  const close = " ".repeat(indent * level);
  if (value === null || value === undefined) return "null";
  if (typeof value === "boolean") return value ? "true" : "false";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : pyFloat(value);
  if (typeof value === "string") return pyJsonString(value);
  if (Array.isArray(value)) {
    if (value.length === 0) return "[]";
    return `[\n${value.map((v) => pad + pyJsonDumps(v, indent, level + 1)).join(",\n")}\n${close}]`;
  }
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length === 0) return "{}";
  const body = entries.map(([k, v]) => `${pad}${pyJsonString(k)}: ${pyJsonDumps(v, indent, level + 1)}`);
  return `{\n${body.join(",\n")}\n${close}}`;
}

function pyFloat(n: number): string {
  const s = String(n);
  return s.includes(".") || s.includes("e") ? s : `${s}.0`;
}

const JSON_SHORT: Record<string, string> = {
  '"': '\\"',
  "\\": "\\\\",
  "\n": "\\n",
  "\r": "\\r",
  "\t": "\\t",
  "\b": "\\b",
  "\f": "\\f",
};

function pyJsonString(s: string): string {
  // ensure_ascii escapes everything outside printable ASCII as \uXXXX over UTF-16 code units,
  // which is exactly what JS strings are made of.
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const ch = s[i] as string;
    const code = s.charCodeAt(i);
    const short = JSON_SHORT[ch];
    if (short !== undefined) out += short;
    else if (code < 0x20 || code > 0x7e) out += `\\u${code.toString(16).padStart(4, "0")}`;
    else out += ch;
  }
  return `${out}"`;
}
