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
  "GEMINI_API_KEY",
  "AWS_SECRET_ACCESS_KEY",
  "AWS_SESSION_TOKEN",
];

const PATTERNS: RegExp[] = [
  // NAME=value and NAME: value for the well-known secret-bearing variables
  new RegExp(`\\b(${ENV_NAMES.join("|")})(\\s*[=:]\\s*)(["']?)[^\\s"']+\\3`, "g"),
  // Authorization / x-api-key headers
  /\b(authorization|x-api-key|api-key|proxy-authorization)(["']?\s*[:=]\s*["']?)(bearer\s+|basic\s+)?[A-Za-z0-9._~+/=-]{8,}/gi,
  // bare bearer tokens
  /\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}/gi,
  // sk- style keys (OpenAI, Anthropic sk-ant-, evalfleet run keys efk-)
  /\b(?:sk|efk|rk)-[A-Za-z0-9_-]{8,}/g,
  // AWS access key ids
  /\bAKIA[0-9A-Z]{16}\b/g,
];

/** Replace API keys, bearer tokens, `sk-` keys and secret env assignments with [REDACTED]. */
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
  return out;
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
