export { type Cost, chargedInputTokens, PoolBucket, type PoolConfig, type PoolLimits } from "./bucket.js";
export {
  type FleetObservation,
  type FleetSize,
  type SizeFleetInput,
  sizeFleet,
  tokensPerCallFromStats,
} from "./fleet.js";
export { FleetPacer, type FleetPacerOptions, type OwnerRecord } from "./fleet-pacer.js";
export {
  type Dim,
  parseDurationMs,
  parseRateLimitHeaders,
  parseRetryAfterMs,
  type RateLimitFacts,
} from "./headers.js";
export { LocalPacer, type PacerPools } from "./local.js";
export type { PoolStatsSnapshot } from "./pool.js";
