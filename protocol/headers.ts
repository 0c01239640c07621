/**
 * HTTP headers evalfleet adds between its own parts. The shim attributes each call to its cell and trace so the
 * gateway's spend log can be reconciled with the ledger per attempt; the gateway never forwards them upstream.
 */
export const AttributionHeaders = {
  cell: "x-evalfleet-cell",
  trace: "x-evalfleet-trace",
  /** the shim's id of one try of a call: the ledger row's call id, so the gateway's row can be matched to it */
  call: "x-evalfleet-call",
  /** the attempt the call belongs to (a run-wide key does not say; an attempt's key does, and wins) */
  attempt: "x-evalfleet-attempt",
} as const;

/** Headers the gateway adds to its answer for the shim (a harness may see them; they say nothing secret). */
export const GatewayAnswerHeaders = {
  /** ms the call waited for its pool's admission at the gateway: the shim's ledger row counts it as pacer wait */
  pacerWaitMs: "x-evalfleet-pacer-wait-ms",
} as const;
