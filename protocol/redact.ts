/** Secret redaction and output truncation, applied before anything is stored, logged or published. */

export const REDACTED = "[REDACTED]";
export const MAX_STREAM_BYTES = 50 * 1024;

const ENV_NAMES = [
  "ANTHROPIC_API_KEY",
  "ANTHROPIC_AUTH_TOKEN",
  "OPENAI_API_KEY",
  "CLAUDE_CODE_OAUTH_TOKEN",
  "EVALFLEET_RUN_KEY",
  "EVALFLEET_UPSTREAM_KEY",
  "EVALFLEET_JUDGE_KEY",
  "GEMINI_API_KEY",
  "AWS_SECRET_ACCESS_KEY",
  "AWS_SESSION_TOKEN",
  "NATS_PASSWORD",
  "NATS_TOKEN",
  "NATS_NKEY_SEED",
  "PGPASSWORD",
];

/**
 * Where a key may start: not inside a word (`task-…` is no `sk-` key), but right after an escape — `\n`, `\t`,
 * `\u001b` in JSON text, `%0A` in a URL — because text is often redacted after it has been serialised.
 */
const START = String.raw`(?:(?<![A-Za-z0-9_])|(?<=\\[nrtbf])|(?<=\\u[0-9A-Fa-f]{4})|(?<=%[0-9A-Fa-f]{2}))`;

const PATTERNS: RegExp[] = [
  // NAME=value and NAME: value for the well-known secret-bearing variables
  new RegExp(`${START}(${ENV_NAMES.join("|")})(\\s*[=:]\\s*)(["']?)[^\\s"']+\\3`, "g"),
  // Authorization / x-api-key headers
  new RegExp(
    `${START}(authorization|x-api-key|api-key|proxy-authorization)(["']?\\s*[:=]\\s*["']?)(bearer\\s+|basic\\s+)?[A-Za-z0-9._~+/=-]{8,}`,
    "gi",
  ),
  // bare bearer tokens
  new RegExp(`${START}(bearer\\s+)[A-Za-z0-9._~+/=-]{8,}`, "gi"),
  // sk- style keys (OpenAI sk-proj-, Anthropic sk-ant-, evalfleet run keys efk-)
  new RegExp(`${START}(?:sk|efk|rk)-[A-Za-z0-9_-]{8,}`, "g"),
  // AWS access key ids (long-term AKIA, temporary ASIA)
  new RegExp(`${START}(?:AKIA|ASIA)[0-9A-Z]{16}`, "g"),
  // NATS nkey seeds (a task's credential): S, the key type, 56 base32 characters
  new RegExp(`${START}S[UANOC][A-Z2-7]{56}`, "g"),
  // a password in a URL (postgres://user:password@host, nats://user:password@host)
  /\b([a-z][a-z0-9+.-]*:\/\/[^\s:/@"']+:)[^\s@/"']+@/gi,
];

/**
 * Replace API keys, bearer tokens, `sk-` keys, AWS key ids, NATS seeds, URL passwords and secret env assignments
 * with [REDACTED], plus every occurrence of the caller's own secrets (the run key, the upstream key).
 */
export function redactSecrets(text: string, extraSecrets: readonly string[] = []): string {
  let out = text;
  for (const secret of extraSecrets) {
    if (secret.length >= 6) out = out.split(secret).join(REDACTED);
  }
  out = out.replace(PATTERNS[0]!, (_m, name: string, sep: string) => `${name}${sep}${REDACTED}`);
  out = out.replace(PATTERNS[1]!, (_m, name: string, sep: string) => `${name}${sep}${REDACTED}`);
  out = out.replace(PATTERNS[2]!, (_m, prefix: string) => `${prefix}${REDACTED}`);
  out = out.replace(PATTERNS[3]!, REDACTED);
  out = out.replace(PATTERNS[4]!, REDACTED);
  out = out.replace(PATTERNS[5]!, REDACTED);
  out = out.replace(PATTERNS[6]!, (_m, prefix: string) => `${prefix}${REDACTED}@`);
  return out;
}

/** The values of the secret-bearing variables in `env`: what a process redacts verbatim besides the patterns. */
export function secretsFromEnv(env: Readonly<Record<string, string | undefined>>): string[] {
  return ENV_NAMES.map((k) => env[k]).filter((v): v is string => typeof v === "string" && v.length >= 6);
}

const own = new Set<string>();

/**
 * Remember this process's own secrets (its settings' secret values, registered by config/ when it loads them),
 * so every log line and stored error is scrubbed of them verbatim, whatever their shape.
 */
export function addOwnSecrets(values: Iterable<string | undefined>): void {
  for (const v of values) if (typeof v === "string" && v.length >= 6) own.add(v);
}

/** This process's own secrets, as registered by addOwnSecrets. */
export function ownSecrets(): string[] {
  return [...own];
}

/** `env` without the secret-bearing variables and connection strings: for code evalfleet runs but did not write. */
export function withoutSecrets(env: Readonly<Record<string, string | undefined>>): NodeJS.ProcessEnv {
  const out: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(env))
    if (!ENV_NAMES.includes(k) && !/^(DATABASE_URL|NATS_|EVALFLEET_)/.test(k)) out[k] = v;
  return out;
}

/** True when `text` holds something redactSecrets would remove. */
export function hasSecret(text: string): boolean {
  return redactSecrets(text) !== text;
}

/**
 * A copy of `value` with every string (keys included) redacted: for structured data that is logged or stored as
 * JSON. Errors become `{ type, message, stack, code }` (their message is otherwise lost to JSON), cycles become
 * "[Circular]", and anything deeper than `maxDepth` "[Too deep]", so this never throws on what it is given.
 */
export function redactValue(value: unknown, extraSecrets: readonly string[] = [], maxDepth = 32): unknown {
  const seen = new Set<object>();
  const walk = (v: unknown, depth: number): unknown => {
    if (typeof v === "string") return redactSecrets(v, extraSecrets);
    if (v === null || typeof v !== "object") return v;
    if (seen.has(v)) return "[Circular]";
    if (depth >= maxDepth) return "[Too deep]";
    seen.add(v);
    try {
      if (v instanceof Error) {
        const out: Record<string, unknown> = { type: v.name, message: walk(v.message, depth + 1) };
        if (v.stack) out.stack = walk(v.stack, depth + 1);
        for (const [k, x] of Object.entries(v)) out[redactSecrets(k, extraSecrets)] = walk(x, depth + 1);
        if (v.cause !== undefined) out.cause = walk(v.cause, depth + 1);
        return out;
      }
      if (Array.isArray(v)) return v.map((x) => walk(x, depth + 1));
      if (v instanceof Date || ArrayBuffer.isView(v)) return v;
      const json = (v as { toJSON?: unknown }).toJSON;
      if (typeof json === "function") return walk(json.call(v), depth + 1);
      const out: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v)) out[redactSecrets(k, extraSecrets)] = walk(x, depth + 1);
      return out;
    } finally {
      seen.delete(v);
    }
  };
  return walk(value, 0);
}

/**
 * Keep the last `maxBytes` of a stream's output (errors and stack traces are at the end) and prepend a notice
 * saying how much was cut. Cuts on a UTF-8 character boundary.
 */
export function truncateTail(text: string, maxBytes = MAX_STREAM_BYTES): string {
  const buf = Buffer.from(text, "utf8");
  if (buf.length <= maxBytes) return text;
  let start = buf.length - maxBytes;
  // step forward past UTF-8 continuation bytes so we never split a character
  while (start < buf.length && ((buf[start] ?? 0) & 0xc0) === 0x80) start++;
  const kept = buf.subarray(start).toString("utf8");
  return `[truncated: ${start} of ${buf.length} bytes omitted; showing the last ${buf.length - start}]\n${kept}`;
}

/** Redact, then truncate: what every stored stdout / stderr / trajectory goes through. */
export function sanitizeOutput(text: string, extraSecrets: readonly string[] = []): string {
  return truncateTail(redactSecrets(text, extraSecrets));
}
