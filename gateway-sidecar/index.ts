export { createRunKey, hashKey, KEY_PREFIX, revokeRunKeys, runForKey } from "./keys.js";
export {
  type AliasDef,
  type Gateway,
  GatewayHeaders,
  type GatewayOptions,
  startGateway,
  type Upstream,
} from "./server.js";
export { type Reconciliation, reconcileAttempt, runSpendNanoUsd, type SpendStatus } from "./spend.js";
