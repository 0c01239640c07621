import { type JetStreamClient, jetstream } from "@nats-io/jetstream";
import { type KV, Kvm } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { encodeJson } from "../../protocol/decode.js";
import type { Logger } from "../../protocol/log.js";
import {
  type CellProgress,
  CellProgressSchema,
  type LedgerCall,
  LedgerCallSchema,
  MessageTypes,
} from "../../protocol/messages.js";
import { redactSecrets } from "../../protocol/redact.js";
import { ProgressKeys, Subjects } from "../../protocol/subjects.js";
import { Buckets } from "../../protocol/topology.js";

const PUBLISH_TRIES = 6;

/**
 * Ledger rows go to JetStream pipelined: each publish is started at once and awaited only by flush(), so no call
 * waits for an ack. A failed publish is retried with the same msgID (JetStream drops duplicates), so retries are safe.
 */
export class LedgerSink {
  private readonly pending = new Set<Promise<void>>();
  private readonly js: JetStreamClient | undefined;
  failures = 0;
  published = 0;

  constructor(
    nc: NatsConnection | undefined,
    private readonly log: Logger,
    private readonly secrets: readonly string[],
    private readonly onRow?: (row: LedgerCall) => void,
  ) {
    this.js = nc ? jetstream(nc) : undefined;
  }

  publish(row: LedgerCall): void {
    this.onRow?.(row);
    if (!this.js) return;
    const data = encodeJson(LedgerCallSchema, row, "ledger call");
    const subject = Subjects.ledger.one(row.run, row.cellId);
    const p = this.send(subject, data, row.callId).finally(() => this.pending.delete(p));
    this.pending.add(p);
  }

  private async send(subject: string, data: Uint8Array, msgID: string): Promise<void> {
    const js = this.js;
    if (!js) return;
    for (let i = 0; ; i++) {
      try {
        await js.publish(subject, data, { msgID, timeout: 10_000 });
        this.published++;
        return;
      } catch (err) {
        if (i + 1 >= PUBLISH_TRIES) {
          this.failures++;
          this.log.error(
            { callId: msgID, err: redactSecrets(String(err), this.secrets) },
            "ledger publish failed",
          );
          return;
        }
        await new Promise((r) => setTimeout(r, 100 * 2 ** i));
      }
    }
  }

  /** Wait until every row published so far is acked (or has failed for good). */
  async flush(): Promise<void> {
    while (this.pending.size > 0) await Promise.all([...this.pending]);
  }
}

export type ProgressSnapshot = Omit<CellProgress, "type" | "updatedAt">;

/**
 * The cell's live progress key, coalesced: at most one put per interval carries the latest totals, so a burst of
 * calls costs one KV write. flush() writes the last state.
 */
export class ProgressWriter {
  private kv: KV | undefined;
  private timer: NodeJS.Timeout | undefined;
  private dirty = false;
  private inflight: Promise<void> | undefined;

  constructor(
    private readonly nc: NatsConnection | undefined,
    private readonly key: string,
    private readonly snapshot: () => ProgressSnapshot,
    private readonly intervalMs: number,
    private readonly log: Logger,
  ) {}

  async open(): Promise<void> {
    if (this.nc) this.kv = await new Kvm(this.nc).open(Buckets.progress.name);
  }

  mark(): void {
    if (!this.kv) return;
    this.dirty = true;
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.write();
    }, this.intervalMs);
    this.timer.unref();
  }

  private async write(): Promise<void> {
    if (!this.kv || !this.dirty) return;
    if (this.inflight) await this.inflight;
    this.dirty = false;
    const value = encodeJson(
      CellProgressSchema,
      { type: MessageTypes.cellProgress, ...this.snapshot(), updatedAt: new Date().toISOString() },
      "cell progress",
    );
    this.inflight = this.kv
      .put(this.key, value)
      .then(() => undefined)
      .catch((err: unknown) => {
        this.dirty = true;
        this.log.warn({ err: String(err) }, "progress write failed");
      })
      .finally(() => {
        this.inflight = undefined;
      });
    await this.inflight;
  }

  async flush(): Promise<void> {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    await this.write();
  }
}

export function progressKey(run: string, cell: string): string {
  return ProgressKeys.cell(run, cell);
}
