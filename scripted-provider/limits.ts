import type { Provider } from "../providers/types.js";
import type { RateLimits } from "./types.js";

/** A token bucket of `limit` per minute, replenished continuously; it may go into debt (output is charged after). */
class Bucket {
  private level: number;
  private at: number;
  constructor(readonly limit: number) {
    this.level = limit;
    this.at = Date.now();
  }
  refill(now: number): void {
    this.level = Math.min(this.limit, this.level + ((now - this.at) * this.limit) / 60_000);
    this.at = now;
  }
  /** ms until `n` are available (0 if now). */
  waitFor(n: number): number {
    const need = Math.min(n, this.limit) - this.level;
    return need <= 0 ? 0 : Math.ceil((need * 60_000) / this.limit);
  }
  take(n: number): void {
    this.level -= n;
  }
  remaining(): number {
    return Math.max(0, Math.floor(this.level));
  }
  /** ms until the bucket is full again */
  fullInMs(): number {
    return Math.ceil(((this.limit - this.level) * 60_000) / this.limit);
  }
}

interface KeyBuckets {
  rpm?: Bucket;
  itpm?: Bucket;
  otpm?: Bucket;
}

/** The provider's own RPM / input-TPM / output-TPM limits per key, with the headers each provider sends. */
export class RateLimiter {
  private readonly byKey = new Map<string, KeyBuckets>();
  constructor(private readonly limits: RateLimits | undefined) {}

  private buckets(key: string, now: number): KeyBuckets {
    let b = this.byKey.get(key);
    if (!b) {
      const l = this.limits ?? {};
      b = {
        ...(l.rpm ? { rpm: new Bucket(l.rpm) } : {}),
        ...(l.inputTpm ? { itpm: new Bucket(l.inputTpm) } : {}),
        ...(l.outputTpm ? { otpm: new Bucket(l.outputTpm) } : {}),
      };
      this.byKey.set(key, b);
    }
    for (const x of [b.rpm, b.itpm, b.otpm]) x?.refill(now);
    return b;
  }

  /** Admit a request (taking 1 request and its input tokens) or say how long to wait, in ms. */
  admit(key: string, inputTokens: number): number {
    if (!this.limits) return 0;
    const b = this.buckets(key, Date.now());
    // Output is charged after the fact, so a bucket in debt blocks until it is repaid.
    const wait = Math.max(b.rpm?.waitFor(1) ?? 0, b.itpm?.waitFor(inputTokens) ?? 0, b.otpm?.waitFor(1) ?? 0);
    if (wait > 0) return wait;
    b.rpm?.take(1);
    b.itpm?.take(inputTokens);
    return 0;
  }

  chargeOutput(key: string, outputTokens: number): void {
    if (!this.limits) return;
    this.buckets(key, Date.now()).otpm?.take(outputTokens);
  }

  headers(provider: Provider, key: string): Record<string, string> {
    if (!this.limits) return {};
    const now = Date.now();
    const b = this.buckets(key, now);
    const h: Record<string, string> = {};
    if (provider === "anthropic") {
      const put = (name: string, x: Bucket | undefined, round: boolean) => {
        if (!x) return;
        h[`anthropic-ratelimit-${name}-limit`] = String(x.limit);
        // Anthropic rounds token `remaining` down to the thousand.
        const r = x.remaining();
        h[`anthropic-ratelimit-${name}-remaining`] = String(round ? Math.floor(r / 1000) * 1000 : r);
        h[`anthropic-ratelimit-${name}-reset`] = new Date(now + x.fullInMs()).toISOString();
      };
      put("requests", b.rpm, false);
      put("input-tokens", b.itpm, true);
      put("output-tokens", b.otpm, true);
      const tokens = b.itpm ?? b.otpm;
      put("tokens", tokens, true);
      return h;
    }
    const put = (name: string, x: Bucket | undefined) => {
      if (!x) return;
      h[`x-ratelimit-limit-${name}`] = String(x.limit);
      h[`x-ratelimit-remaining-${name}`] = String(x.remaining());
      h[`x-ratelimit-reset-${name}`] = duration(x.fullInMs());
    };
    put("requests", b.rpm);
    put("tokens", b.itpm ?? b.otpm);
    return h;
  }
}

/** OpenAI's reset format: `1s`, `250ms`, `6m0s`. */
function duration(ms: number): string {
  if (ms < 1000) return `${ms}ms`;
  const s = Math.ceil(ms / 1000);
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${s % 60}s`;
}
