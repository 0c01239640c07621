import type { NatsConnection } from "@nats-io/transport-node";

/** The messages of a subject, kept by their cellId as they arrive. */
export interface ByCell<T> {
  readonly seen: ReadonlyMap<string, T>;
  /** The cell's message: at once if it came already, else when it comes; fails after `timeoutMs`. */
  wait(cellId: string, timeoutMs?: number): Promise<T>;
  stop(): void;
}

/** Subscribes to `subject` and keeps each message (JSON with a cellId) by cell; `what` names it in a timeout. */
export function collectByCell<T extends { cellId: string }>(
  nc: NatsConnection,
  subject: string,
  what: string,
): ByCell<T> {
  const seen = new Map<string, T>();
  const waiters = new Map<string, (v: T) => void>();
  const sub = nc.subscribe(subject);
  void (async () => {
    for await (const m of sub) {
      const v = m.json<T>();
      seen.set(v.cellId, v);
      waiters.get(v.cellId)?.(v);
    }
  })();
  return {
    seen,
    wait(cellId, timeoutMs = 60_000) {
      const have = seen.get(cellId);
      if (have) return Promise.resolve(have);
      return new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`no ${what} for ${cellId}`)), timeoutMs);
        waiters.set(cellId, (v) => {
          clearTimeout(t);
          resolve(v);
        });
      });
    },
    stop: () => sub.unsubscribe(),
  };
}
