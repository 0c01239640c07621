import type { NatsConnection } from "@nats-io/transport-node";
import type { Logger } from "../lib/log.js";
import { FleetPacer } from "../pacer/fleet-pacer.js";
import type { PoolConfig } from "../pacer/index.js";

/**
 * How long a gateway waits for a pool owner before forwarding a call unpaced. An owner's lease is 1.5 s, so a live
 * fleet hands a pool over well within this; longer means NATS itself is away, and every call waiting on it would
 * only add latency: the provider's own limits still hold (a 429 the shim retries).
 */
const GATEWAY_OWNER_WAIT_MS = 3_000;

/**
 * The gateway's pacer: the fleet pacer over NATS, shared by every replica (one owner per pool, any replica may own),
 * with the configured pool limits for pools whose limits the providers' headers have not told yet.
 */
export function openGatewayPacer(
  nc: NatsConnection,
  pools: Record<string, PoolConfig>,
  log: Logger,
): Promise<FleetPacer> {
  return FleetPacer.open({ nc, pools, log, ownerWaitMs: GATEWAY_OWNER_WAIT_MS });
}
