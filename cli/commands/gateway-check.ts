import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";

/** The gateway preflight, worded as the seed shows it. Reusable by any command that needs the gateway up. */

export interface GatewayCheck {
  ok: boolean;
  host: string;
  port: number;
  /** The seed's three lines when not reachable. */
  message?: string;
}

/**
 * The seed's message, with evalfleet's command. The remedy is the whole plane (`up`), not a bare `evalfleet
 * gateway`: a gateway alone knows none of the plane's model aliases and the run's calls would fail there.
 */
export function gatewayUnreachableMessage(host: string, port: number): string {
  if (!["127.0.0.1", "localhost", "::1"].includes(host))
    return [
      `Gateway is NOT reachable on ${host}:${port}.`,
      "Start the plane's gateway there, or set EVALFLEET_GATEWAY_URL to where it listens.",
      "Then re-run this command.",
    ].join("\n");
  return [
    `Gateway is NOT reachable on ${host}:${port}.`,
    "Start the plane (its gateway included) in another terminal with:",
    `  evalfleet up --gateway-port ${port}`,
    "Then re-run this command (or set EVALFLEET_GATEWAY_URL to a plane's gateway elsewhere).",
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
