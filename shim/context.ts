import type { Pool } from "undici";
import type { Logger } from "../lib/log.js";
import type { CostMode } from "../protocol/config.js";
import type { Pacer } from "../protocol/pacer.js";
import type { PriceTable } from "../providers/pricing.js";
import type { LedgerSink, ProgressWriter } from "./sink.js";
import type { AttemptState, CapReason } from "./state.js";

export interface RetryPolicy {
  /** retries after the first try (429 / 529 / 503 / overload before the first byte / connection errors) */
  maxRetries: number;
  baseDelayMs: number;
  maxDelayMs: number;
  /** the longest retry-after honoured; longer ones are waited this long */
  maxRetryAfterMs: number;
}

/** Everything a call handler needs, built once by startShim. */
export interface ShimContext {
  run: string;
  cell: string;
  attempt: number;
  pool: string;
  traceId: string;
  costMode: CostMode;
  key: string;
  aliases: Record<string, string>;
  upstream: Pool;
  basePath: string;
  prices: PriceTable;
  pacer: Pacer;
  state: AttemptState;
  ledger: LedgerSink;
  progress: ProgressWriter;
  log: Logger;
  retry: RetryPolicy;
  /** output tokens assumed for admission and reservation when a request sets no cap */
  defaultMaxOutputTokens: number;
  fireCap(reason: CapReason): void;
}
