import { randomBytes } from "node:crypto";
import { readFile, rename, rm, writeFile } from "node:fs/promises";
import { type KV, Kvm } from "@nats-io/kv";
import {
  createInbox,
  headers,
  type Msg,
  type NatsConnection,
  type Subscription,
} from "@nats-io/transport-node";
import type { Logger } from "../lib/log.js";
import { inboxOf } from "../plane/connect.js";
import { encodeJson } from "../protocol/decode.js";
import { MsgIds } from "../protocol/ids.js";
import {
  type CellProgress,
  CellProgressSchema,
  type LedgerCall,
  LedgerCallSchema,
  MessageTypes,
} from "../protocol/messages.js";
import { redactSecrets } from "../protocol/redact.js";
import { ProgressKeys, Subjects } from "../protocol/subjects.js";
import { Buckets } from "../protocol/topology.js";

const ACK_TIMEOUT_MS = 5_000;
const BATCH_MS = 5;
/** sentAt of a row waiting for its batch (the sweeper leaves it alone) */
const QUEUED = -1;
const MAX_TRIES = 20;

interface Pending {
  subject: string;
  data: Uint8Array;
  msgID: string;
  tries: number;
  sentAt: number;
  /** not before this time (backoff after a negative ack) */
  retryAt: number;
}

/**
 * Ledger rows go to JetStream pipelined and off the hot path: each row is a core publish with a Nats-Msg-Id header
 * and a reply subject under one inbox subscription, so a row costs no request object, promise or timer of its own.
 * The stream's ack (or its error, or silence past the timeout) arrives on that inbox; a row not acked is sent again
 * with the same msgID, which JetStream's duplicate window drops if the first copy did land.
 *
 * With a spool file, no row is ever dropped: a row still unacked when the shim stops (or past its tries) is written
 * there, one JSON line per row (a temp file renamed over it), and the next sink on the same spool publishes it
 * again under its own msgID (`restore`), so a row that did land meanwhile is dropped as a duplicate.
 */
export class LedgerSink {
  private readonly pending = new Map<number, Pending>();
  private readonly inbox: string;
  private readonly sub: Subscription | undefined;
  private readonly names = new Map<string, string>();
  private seq = 0;
  private queue: number[] = [];
  private batch: NodeJS.Timeout | undefined;
  private sweeper: NodeJS.Timeout | undefined;
  private waiters: Array<() => void> = [];
  /** rows past their tries, kept for the spool file (with one) */
  private readonly spilled: Pending[] = [];
  failures = 0;
  published = 0;

  constructor(
    private readonly nc: NatsConnection | undefined,
    private readonly log: Logger,
    private readonly secrets: readonly string[],
    private readonly onRow?: (row: LedgerCall) => void,
    private readonly spoolPath?: string,
  ) {
    // Under the connection's own inbox prefix: a per-attempt NATS user may hear nothing else.
    this.inbox = nc ? inboxOf(nc) : createInbox();
    this.sub = nc?.subscribe(`${this.inbox}.*`, {
      callback: (err, msg) => (err ? undefined : this.onAck(msg)),
    });
  }

  publish(raw: LedgerCall): void {
    // The model names are whatever the harness asked for and the provider answered: free text, like its output.
    const model = this.clean(raw.model);
    const alias = this.clean(raw.alias);
    const row = model === raw.model && alias === raw.alias ? raw : { ...raw, model, alias };
    this.onRow?.(row);
    this.enqueue(row);
  }

  /**
   * Publish again the rows a previous sink left in the spool file (the file stays until they are acked: `spool`
   * rewrites or removes it). Returns how many rows it held.
   */
  async restore(): Promise<number> {
    if (!this.spoolPath || !this.nc) return 0;
    let text: string;
    try {
      text = await readFile(this.spoolPath, "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return 0;
      throw err;
    }
    let n = 0;
    for (const line of text.split("\n")) {
      if (line.trim() === "") continue;
      let parsed: unknown;
      try {
        parsed = JSON.parse(line);
      } catch {
        parsed = undefined;
      }
      const row = LedgerCallSchema.safeParse(parsed);
      if (!row.success) {
        this.log.error(
          { spool: this.spoolPath, line: line.slice(0, 500) },
          "unreadable ledger row in the spool; kept in the log",
        );
        continue;
      }
      this.enqueue(row.data);
      n++;
    }
    return n;
  }

  /**
   * Write every row not acked yet (and every row past its tries) to the spool file, or remove the file when there is
   * none. Returns how many rows it holds. Without a spool file, nothing.
   */
  async spool(): Promise<number> {
    if (!this.spoolPath) return 0;
    const rows = [...this.pending.values(), ...this.spilled];
    if (rows.length === 0) {
      await rm(this.spoolPath, { force: true });
      return 0;
    }
    const dec = new TextDecoder();
    const tmp = `${this.spoolPath}.${randomBytes(4).toString("hex")}.tmp`;
    await writeFile(tmp, `${rows.map((r) => dec.decode(r.data)).join("\n")}\n`, { flush: true });
    await rename(tmp, this.spoolPath);
    return rows.length;
  }

  private enqueue(row: LedgerCall): void {
    if (!this.nc) return;
    const data = encodeLedgerRow(row);
    const seq = ++this.seq;
    const p: Pending = {
      subject: Subjects.ledger.one(row.run, row.cellId, row.attempt),
      data,
      msgID: MsgIds.ledgerCall(row.callId),
      tries: 0,
      sentAt: QUEUED,
      retryAt: 0,
    };
    this.pending.set(seq, p);
    this.queue.push(seq);
    // Rows of calls that end within a few ms go out together: one socket write instead of one per row.
    this.batch ??= setTimeout(() => this.sendQueued(), BATCH_MS);
    this.sweeper ??= setInterval(() => this.sweep(), 250).unref();
  }

  /** redactSecrets of a model name, remembered: a session asks for the same few names on every call */
  private clean(name: string): string {
    let out = this.names.get(name);
    if (out === undefined) {
      out = redactSecrets(name, this.secrets);
      if (this.names.size >= 64) this.names.clear();
      this.names.set(name, out);
    }
    return out;
  }

  private sendQueued(): void {
    this.batch = undefined;
    const q = this.queue;
    this.queue = [];
    for (const seq of q) {
      const p = this.pending.get(seq);
      if (p) this.send(seq, p);
    }
  }

  private send(seq: number, p: Pending): void {
    p.tries++;
    p.sentAt = Date.now();
    const h = headers();
    h.set("Nats-Msg-Id", p.msgID);
    try {
      this.nc?.publish(p.subject, p.data, { reply: `${this.inbox}.${seq}`, headers: h });
    } catch (err) {
      // closed or draining connection: the sweeper tries again
      this.log.warn({ err: redactSecrets(String(err), this.secrets) }, "ledger publish failed");
    }
  }

  private onAck(msg: Msg): void {
    const seq = Number(msg.subject.slice(this.inbox.length + 1));
    const p = this.pending.get(seq);
    if (!p) return;
    let ok = false;
    if (msg.data.length > 0) {
      try {
        const ack = JSON.parse(msg.string()) as { stream?: string; error?: { description?: string } };
        ok = !ack.error && typeof ack.stream === "string";
        if (!ok) this.log.warn({ callId: p.msgID, error: ack.error?.description }, "ledger publish rejected");
      } catch {
        ok = false;
      }
    }
    if (ok) {
      this.pending.delete(seq);
      this.published++;
      this.wake();
      return;
    }
    // no responders (JetStream not ready) or a negative ack: back off, the sweeper resends
    p.retryAt = Date.now() + Math.min(5_000, 100 * 2 ** p.tries);
    p.sentAt = 0;
  }

  private sweep(): void {
    const now = Date.now();
    for (const [seq, p] of this.pending) {
      if (p.sentAt === QUEUED) continue;
      const due = p.sentAt === 0 ? now >= p.retryAt : now - p.sentAt >= ACK_TIMEOUT_MS;
      if (!due) continue;
      if (p.tries >= MAX_TRIES) {
        // Money must not vanish silently: the row (no secrets in it) goes to the error log, and to the spool file.
        this.pending.delete(seq);
        this.failures++;
        if (this.spoolPath) {
          this.spilled.push(p);
          void this.spool().catch((err: unknown) =>
            this.log.error({ err: String(err), spool: this.spoolPath }, "cannot write the ledger spool"),
          );
        }
        this.log.error(
          { callId: p.msgID, row: new TextDecoder().decode(p.data) },
          "ledger row not acked; giving up",
        );
        this.wake();
        continue;
      }
      this.send(seq, p);
    }
    if (this.pending.size === 0 && this.sweeper) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
    }
  }

  private wake(): void {
    if (this.pending.size > 0) return;
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  /**
   * Wait until every row published so far is acked (or has failed for good), or `withinMs` has passed (then rows may
   * still be pending: `spool` keeps them).
   */
  async flush(withinMs?: number): Promise<void> {
    if (this.batch) {
      clearTimeout(this.batch);
      this.sendQueued();
    }
    if (this.pending.size === 0) return;
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      this.waiters.push(resolve);
      if (withinMs !== undefined) timer = setTimeout(resolve, withinMs);
    });
    clearTimeout(timer);
  }

  /**
   * Flush (for at most `withinMs`), write what is left to the spool file, then drop the ack subscription. Shims that
   * share one connection (the sim backend runs thousands in one process) would otherwise each leave a subscription
   * behind.
   */
  async close(withinMs?: number): Promise<void> {
    await this.flush(withinMs);
    const left = await this.spool();
    if (left > 0)
      this.log.warn({ rows: left, spool: this.spoolPath }, "ledger rows not acked: kept in the spool");
    this.sub?.unsubscribe();
    if (this.sweeper) clearInterval(this.sweeper);
    this.sweeper = undefined;
  }
}

const INT_FIELDS = [
  "attempt",
  "inputTokens",
  "outputTokens",
  "cacheReadTokens",
  "cacheWriteTokens",
  "reasoningTokens",
  "costNanoUsd",
  "latencyMs",
  "pacerWaitMs",
  "retries",
] as const satisfies ReadonlyArray<keyof LedgerCall>;
const NULLABLE_INT_FIELDS = ["httpStatus", "ttfbMs", "clampedMaxTokens"] as const satisfies ReadonlyArray<
  keyof LedgerCall
>;
const encoder = new TextEncoder();

/**
 * A ledger row on the wire. The row is built by typed code, so what can go wrong is a number (NaN, a fraction, a
 * negative count from a provider's odd usage): those are checked here in a few ns per field, and only a row that
 * fails goes through the schema, whose error names the field. The full schema check per call was a tenth of the
 * shim's user-space CPU.
 */
export function encodeLedgerRow(row: LedgerCall): Uint8Array {
  let ok = typeof row.callId === "string" && row.callId.length > 0;
  for (const f of INT_FIELDS) ok &&= Number.isSafeInteger(row[f]) && row[f] >= 0;
  for (const f of NULLABLE_INT_FIELDS) {
    const v = row[f];
    ok &&= v === null || Number.isSafeInteger(v);
  }
  if (!ok) return encodeJson(LedgerCallSchema, row, "ledger call");
  return encoder.encode(JSON.stringify(row));
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
