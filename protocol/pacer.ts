/**
 * The contract between a caller of the provider (the shim, the judge) and the pool's pacer. The shim asks before
 * each call with an estimate, then settles with the real usage or refunds a failed call. Implementations: an
 * in-process bucket (tests, single process) and the fleet-wide pacer backed by the `pacer` KV bucket.
 */
export interface AdmissionRequest {
  pool: string;
  /** input tokens counted from the request, charged at their real weight (cache reads may not count) */
  inputTokens: number;
  /** output tokens: max_tokens, or the pool's observed p95 when the request sets none */
  outputTokens: number;
}

export interface ActualUsage {
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
}

export interface Admission {
  /** How long the caller waited for admission. */
  readonly waitedMs: number;
  /** Replace the estimate with what the call really used. */
  settle(actual: ActualUsage): void;
  /** The call failed without consuming provider capacity: give the tokens back. */
  refund(): void;
}

/** Rate-limit facts read off a provider response, fed back to the pool. */
export interface LimitObservation {
  pool: string;
  status: number;
  /** lower-cased response headers */
  headers: Record<string, string>;
}

export interface Pacer {
  admit(req: AdmissionRequest, signal?: AbortSignal): Promise<Admission>;
  observe(obs: LimitObservation): void;
  close(): Promise<void>;
}

/** A pacer that admits everything at once (no limits configured). */
export class UnlimitedPacer implements Pacer {
  async admit(): Promise<Admission> {
    return { waitedMs: 0, settle() {}, refund() {} };
  }
  observe(): void {}
  async close(): Promise<void> {}
}
