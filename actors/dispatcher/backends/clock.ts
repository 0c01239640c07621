/** Time as the pacing code sees it. Injected so tests run hours of launches in simulated time. */
export interface Clock {
  /** Milliseconds on a monotonic-enough scale. */
  now(): number;
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const systemClock: Clock = {
  now: () => performance.timeOrigin + performance.now(),
  sleep: (ms, signal) =>
    new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason);
      const t = setTimeout(() => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      }, ms);
      const onAbort = (): void => {
        clearTimeout(t);
        reject(signal?.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
    }),
};

/**
 * A discrete-event clock for tests: time stands still while anything can still run, and jumps to the next timer
 * only once the microtask queue has drained (one timer per macrotask turn). Concurrent sleepers therefore see the
 * same time line a real run would, hours of it in well under a second.
 */
export class SimClock implements Clock {
  private t: number;
  private seq = 0;
  private scheduled = false;
  private readonly timers: Array<{ at: number; seq: number; resolve: () => void }> = [];

  constructor(startMs = 0) {
    this.t = startMs;
  }

  now(): number {
    return this.t;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    return new Promise<void>((resolve, reject) => {
      const timer = { at: this.t + Math.max(0, ms), seq: this.seq++, resolve };
      this.timers.push(timer);
      signal?.addEventListener(
        "abort",
        () => {
          const i = this.timers.indexOf(timer);
          if (i >= 0) this.timers.splice(i, 1);
          reject(signal.reason);
        },
        { once: true },
      );
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.timers.length === 0) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      let next = 0;
      for (let i = 1; i < this.timers.length; i++) {
        const a = this.timers[i]!;
        const b = this.timers[next]!;
        if (a.at < b.at || (a.at === b.at && a.seq < b.seq)) next = i;
      }
      const [timer] = this.timers.splice(next, 1);
      if (timer) {
        if (timer.at > this.t) this.t = timer.at;
        timer.resolve();
      }
      this.schedule();
    });
  }

  /** Move time forward by hand (a test standing in for the world outside). */
  advance(ms: number): void {
    this.t += ms;
  }
}
