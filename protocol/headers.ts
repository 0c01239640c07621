/**
 * HTTP headers evalfleet adds between its own parts. The shim attributes each call to its cell and trace so the
 * gateway's spend log can be reconciled with the ledger per attempt; the gateway never forwards them upstream.
 */
export const AttributionHeaders = { cell: "x-evalfleet-cell", trace: "x-evalfleet-trace" } as const;
