import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";

/** The gateway preflight, worded as the seed shows it. Reusable by any command that needs the gateway up. */

/** Where the gateway is expected: EVALFLEET_GATEWAY_URL, else the `evalfleet gateway` default port on localhost. */
export function defaultGatewayUrl(): string {
  return process.env.EVALFLEET_GATEWAY_URL ?? "http://127.0.0.1:8787";
}

export interface GatewayCheck {
  ok: boolean;
  host: string;
  port: number;
  /** The seed's three lines when not reachable. */
  message?: string;
}

/** The seed's message, with evalfleet's command. */
export function gatewayUnreachableMessage(host: string, port: number): string {
  return [
    `Gateway is NOT reachable on ${host}:${port}.`,
    "Start it in another terminal with:",
    `  evalfleet gateway --port ${port}`,
    "Then re-run this command.",
  ].join("\n");
}

/**
 * Is anything answering HTTP at `url`? Any response counts (the gateway answers 401 without a run key); a refused
 * connection, a timeout or a non-HTTP peer does not.
 */
export async function checkGateway(url: string, opts: { timeoutMs?: number } = {}): Promise<GatewayCheck> {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new EvalfleetError(
      ErrorCode.InvalidConfig,
      `gateway URL "${url}" is not a URL (e.g. http://127.0.0.1:8787)`,
    );
  }
  const host = u.hostname;
  const port = Number(u.port || (u.protocol === "https:" ? 443 : 80));
  try {
    const res = await fetch(u, { method: "GET", signal: AbortSignal.timeout(opts.timeoutMs ?? 2_000) });
    await res.body?.cancel();
    return { ok: true, host, port };
  } catch {
    return { ok: false, host, port, message: gatewayUnreachableMessage(host, port) };
  }
}
