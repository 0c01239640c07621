import { isRecord, type Provider, type ProviderErrorInfo } from "./types.js";

/** Anthropic's error body: `{type:"error", error:{type, message}}`. */
export function anthropicErrorBody(type: string, message: string): Record<string, unknown> {
  return { type: "error", error: { type, message } };
}

/** OpenAI's error body: `{error:{message, type, code, param}}`. */
export function openaiErrorBody(
  message: string,
  type: string,
  code: string | null = null,
): Record<string, unknown> {
  return { error: { message, type, code, param: null } };
}

/** The kinds of error evalfleet itself returns, mapped to each provider's own shape and status. */
export type ShimErrorKind =
  | "budget_exceeded"
  | "max_turns_exceeded"
  | "overloaded"
  | "bad_request"
  | "upstream";

const ANTHROPIC: Record<ShimErrorKind, { status: number; type: string }> = {
  // 402 billing_error: SDKs and harnesses treat it as final instead of retrying it
  budget_exceeded: { status: 402, type: "billing_error" },
  max_turns_exceeded: { status: 402, type: "billing_error" },
  overloaded: { status: 529, type: "overloaded_error" },
  bad_request: { status: 400, type: "invalid_request_error" },
  upstream: { status: 502, type: "api_error" },
};

const OPENAI: Record<ShimErrorKind, { status: number; type: string; code: string }> = {
  budget_exceeded: { status: 402, type: "insufficient_quota", code: "budget_exceeded" },
  max_turns_exceeded: { status: 402, type: "insufficient_quota", code: "max_turns_exceeded" },
  overloaded: { status: 503, type: "server_error", code: "overloaded" },
  bad_request: { status: 400, type: "invalid_request_error", code: "invalid_request" },
  upstream: { status: 502, type: "server_error", code: "upstream_error" },
};

/** A provider-shaped error response: HTTP status and JSON body text. */
export function shimError(
  provider: Provider,
  kind: ShimErrorKind,
  message: string,
): { status: number; body: string } {
  if (provider === "anthropic") {
    const e = ANTHROPIC[kind];
    return { status: e.status, body: JSON.stringify(anthropicErrorBody(e.type, message)) };
  }
  const e = OPENAI[kind];
  return { status: e.status, body: JSON.stringify(openaiErrorBody(message, e.type, e.code)) };
}

/** Read an error out of either provider's body shape (or an SSE error event's data). */
export function errorFromJson(body: unknown): ProviderErrorInfo | undefined {
  if (!isRecord(body)) return undefined;
  const e = body.error;
  if (!isRecord(e)) return undefined;
  const details = isRecord(e.details) ? e.details : undefined;
  const code =
    typeof details?.error_code === "string"
      ? details.error_code
      : typeof e.code === "string"
        ? e.code
        : undefined;
  return {
    type: typeof e.type === "string" ? e.type : "error",
    message: typeof e.message === "string" ? e.message : "",
    ...(code !== undefined ? { code } : {}),
  };
}

export function errorFromText(text: string): ProviderErrorInfo | undefined {
  try {
    return errorFromJson(JSON.parse(text));
  } catch {
    return undefined;
  }
}

/** A spend limit (or exhausted quota) will not lift by waiting: never retry it. */
export function isSpendLimit(e: ProviderErrorInfo | undefined): boolean {
  if (!e) return false;
  return (
    e.code === "enforced_spend_limit_reached" ||
    e.type === "enforced_spend_limit_reached" ||
    e.code === "insufficient_quota"
  );
}

/** An overload or rate limit: worth retrying after a wait. */
export function isOverload(e: ProviderErrorInfo | undefined): boolean {
  return e?.type === "overloaded_error" || e?.type === "rate_limit_error";
}
