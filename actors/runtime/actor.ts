import { randomUUID } from "node:crypto";
import { hostname } from "node:os";
import { setTimeout as sleep } from "node:timers/promises";
import type { ConsumerMessages, JsMsg } from "@nats-io/jetstream";
import type { z } from "zod";
import type { Logger } from "../../lib/log.js";
import { watchQueue } from "../../lib/metrics.js";
import type { Plane } from "../../plane/connect.js";
import { decodeJson } from "../../protocol/decode.js";
import { ErrorCode, EvalfleetError, toEvalfleetError, ValidationError } from "../../protocol/errors.js";
import { type Heartbeat, MessageTypes, type RunEvent } from "../../protocol/messages.js";
import { ProgressKeys, Subjects } from "../../protocol/subjects.js";
import type { ConsumerDef } from "../../protocol/topology.js";

/** The lifecycle of an actor, as an explicit state machine. */
export type ActorState = "starting" | "running" | "draining" | "stopped" | "failed";

/** What a handler sees for one message. */
export interface Delivery<T> {
  value: T;
  subject: string;
  deliveryCount: number;
  streamSeq: number;
  /** Tell the server the handler is still working (resets ack_wait). */
  working(): void;
  signal: AbortSignal;
}

export interface ConsumeOptions<S extends z.ZodType> {
  def: ConsumerDef;
  schema: S;
  /** Human name of the message for error texts. */
  what: string;
  /**
   * The one subject a message with this body may arrive on. A message whose body names another run, cell or attempt
   * than its subject is refused as invalid: publish permissions are per subject (a task's NATS user may publish only
   * on its own attempt's), so the body must not claim more than the subject it was allowed.
   */
  subjectOf?: (value: z.output<S>) => string;
  /** Parse the raw body instead of JSON + schema (the planner takes YAML too). */
  decode?: (data: Uint8Array, msg: JsMsg) => z.output<S>;
  /** Handle one message; its durable effect must be committed before it returns. */
  handle?: (d: Delivery<z.output<S>>) => Promise<void>;
  /** Handle a batch (results-writer): all acked after the batch's effect commits. */
  handleBatch?: (batch: Delivery<z.output<S>>[]) => Promise<void>;
  concurrency?: number;
  batchSize?: number;
  batchWaitMs?: number;
  /** Deliveries of a failing message before it is terminated as poison. */
  maxAttempts?: number;
  /** Called for a poison message: publish an event that says why. */
  onPoison?: (raw: Uint8Array, subject: string, err: EvalfleetError) => Promise<void>;
}

const RETRY_DELAYS_MS = [250, 1_000, 5_000, 15_000, 30_000];
/**
 * A dependency that is down (the database, NATS) fails every message alike and fast, so backing each one off further
 * protects nothing; it only kept work stalled for 15 to 30 s after a few seconds of outage. Short, capped, jittered.
 */
const UNAVAILABLE_DELAYS_MS = [250, 500, 1_000, 2_000];
/** Storage full lasts until someone frees space: try again every few seconds, without burning through deliveries. */
const STORAGE_FULL_DELAYS_MS = [1_000, 2_000, 5_000, 10_000];

/** How long a message waits before its next delivery after the handler failed on delivery `attempts`. */
export function retryDelayMs(
  err: EvalfleetError,
  attempts: number,
  random: () => number = Math.random,
): number {
  const table =
    err.code === ErrorCode.StorageFull
      ? STORAGE_FULL_DELAYS_MS
      : err.code === ErrorCode.Unavailable
        ? UNAVAILABLE_DELAYS_MS
        : RETRY_DELAYS_MS;
  const base = table[Math.min(Math.max(1, attempts) - 1, table.length - 1)] ?? 30_000;
  return Math.round(base * (0.8 + 0.4 * random()));
}

/**
 * The small runtime every actor shares: consume a durable pull consumer, decode (= validate), handle, ack after the
 * durable effect, nak with delay on retryable errors, terminate poison with an event, heartbeat into KV, and drain on
 * request within a deadline. N replicas of an actor share one durable consumer.
 */
export class Actor {
  readonly id: string;
  private _state: ActorState = "starting";
  private readonly abort = new AbortController();
  private readonly loops: Promise<void>[] = [];
  private readonly subs: ConsumerMessages[] = [];
  private inFlight = 0;
  /** why work is held up (storage full), until a message is handled again */
  private blocked: string | undefined;
  private blockedAtMs = 0;
  private handled = 0;
  private failed = 0;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private readonly startedAt = new Date().toISOString();
  private resolveStopped!: (cause: string) => void;
  /** Resolves (never rejects) with why the actor stopped. */
  readonly stopped: Promise<string>;
  private readonly unwatch: Array<() => void> = [];

  constructor(
    readonly name: string,
    readonly plane: Plane,
    readonly log: Logger,
    opts: { id?: string; heartbeatMs?: number } = {},
  ) {
    this.id = opts.id ?? `${hostname()}-${process.pid}-${randomUUID().slice(0, 8)}`;
    this.stopped = new Promise((r) => {
      this.resolveStopped = r;
    });
    this.heartbeatTimer = setInterval(() => void this.heartbeat(), opts.heartbeatMs ?? 5_000);
    this.heartbeatTimer.unref();
  }

  get state(): ActorState {
    return this._state;
  }

  get signal(): AbortSignal {
    return this.abort.signal;
  }

  /** Mark the actor running and write its first heartbeat. */
  async start(): Promise<void> {
    this._state = "running";
    await this.heartbeat();
  }

  /** Start consuming one durable consumer. */
  async consume<S extends z.ZodType>(opts: ConsumeOptions<S>): Promise<void> {
    const consumer = await this.plane.js.consumers.get(opts.def.stream, opts.def.durable);
    const batchSize = opts.batchSize ?? 1;
    const maxMessages = Math.max(opts.concurrency ?? 1, batchSize) * 2;
    // A consumer or stream deleted under us ends the loop (the actor fails, its process is restarted and makes the
    // topology again) instead of waiting for someone to put it back.
    const messages = await consumer.consume({
      max_messages: Math.min(maxMessages, opts.def.maxAckPending),
      abort_on_missing_resource: true,
    });
    this.subs.push(messages);
    // /metrics: the consumer's backlog, read when scraped, until this actor stops.
    this.unwatch.push(
      watchQueue(opts.def.stream, opts.def.durable, async () => {
        const info = await consumer.info();
        return { pending: info.num_pending, ackPending: info.num_ack_pending };
      }),
    );
    const loop = opts.handleBatch ? this.batchLoop(messages, opts) : this.concurrentLoop(messages, opts);
    // A consume loop ends only when the actor drains. One that throws, or ends while the actor still runs (its
    // consumer deleted, the connection closed for good), leaves an actor that takes no more work: it fails, and
    // its process exits non-zero so a supervisor starts another (RunningActors.failed).
    this.loops.push(
      loop.then(
        () => this.loopEnded(opts.def.durable, null),
        (err: unknown) => this.loopEnded(opts.def.durable, err),
      ),
    );
  }

  /**
   * Run `fn` now and then every `intervalMs` until the actor drains. A failing tick is logged and the next one still
   * comes; the loop counts as in-flight work only while a tick runs, so a drain waits for that tick and no more.
   */
  every(what: string, intervalMs: number, fn: (signal: AbortSignal) => Promise<void>): void {
    const signal = this.abort.signal;
    const loop = (async () => {
      while (!signal.aborted && this._state !== "draining") {
        this.inFlight++;
        try {
          await fn(signal);
        } catch (err) {
          if (!signal.aborted) this.log.warn({ err, what }, `${what} failed; next try in ${intervalMs} ms`);
        } finally {
          this.inFlight--;
        }
        await sleep(intervalMs, undefined, { signal }).catch(() => {});
      }
    })();
    this.loops.push(loop);
  }

  private async concurrentLoop<S extends z.ZodType>(
    messages: ConsumerMessages,
    opts: ConsumeOptions<S>,
  ): Promise<void> {
    const limit = opts.concurrency ?? 1;
    const running = new Set<Promise<void>>();
    for await (const msg of messages) {
      if (this.abort.signal.aborted) {
        msg.nak();
        continue;
      }
      const p = this.one(msg, opts).finally(() => running.delete(p));
      running.add(p);
      if (running.size >= limit) await Promise.race(running);
    }
    await Promise.allSettled(running);
  }

  private async batchLoop<S extends z.ZodType>(
    messages: ConsumerMessages,
    opts: ConsumeOptions<S>,
  ): Promise<void> {
    const size = opts.batchSize ?? 500;
    const waitMs = opts.batchWaitMs ?? 20;
    let batch: JsMsg[] = [];
    let timer: NodeJS.Timeout | undefined;
    let flushing: Promise<void> = Promise.resolve();
    const flush = () => {
      if (timer) clearTimeout(timer);
      timer = undefined;
      const taken = batch;
      batch = [];
      if (taken.length === 0) return;
      flushing = flushing.then(() => this.many(taken, opts));
    };
    for await (const msg of messages) {
      batch.push(msg);
      if (batch.length >= size) {
        flush();
        await flushing;
      } else if (!timer) timer = setTimeout(flush, waitMs);
    }
    flush();
    await flushing;
  }

  private decodeOne<S extends z.ZodType>(msg: JsMsg, opts: ConsumeOptions<S>): z.output<S> {
    const value = opts.decode ? opts.decode(msg.data, msg) : decodeJson(opts.schema, msg.data, opts.what);
    const want = opts.subjectOf?.(value);
    if (want !== undefined && want !== msg.subject)
      throw new ValidationError(
        ErrorCode.InvalidMessage,
        `${opts.what} arrived on ${msg.subject} but its body belongs on ${want}: refused (a publisher may speak only for the attempt its subject names)`,
        [{ path: "subject", reason: `expected ${want}` }],
      );
    return value;
  }

  private delivery<T>(msg: JsMsg, value: T): Delivery<T> {
    return {
      value,
      subject: msg.subject,
      deliveryCount: msg.info.deliveryCount,
      streamSeq: msg.info.streamSequence,
      working: () => msg.working(),
      signal: this.abort.signal,
    };
  }

  private async one<S extends z.ZodType>(msg: JsMsg, opts: ConsumeOptions<S>): Promise<void> {
    this.inFlight++;
    try {
      const value = this.decodeOne(msg, opts);
      await opts.handle!(this.delivery(msg, value));
      await msg.ackAck().catch(() => msg.ack());
      this.handled++;
      this.unblocked();
    } catch (err) {
      await this.failMessage(msg, opts, toEvalfleetError(err));
    } finally {
      this.inFlight--;
    }
  }

  private async many<S extends z.ZodType>(msgs: JsMsg[], opts: ConsumeOptions<S>): Promise<void> {
    this.inFlight += msgs.length;
    try {
      const ok: Array<{ msg: JsMsg; d: Delivery<z.output<S>> }> = [];
      for (const msg of msgs) {
        try {
          ok.push({ msg, d: this.delivery(msg, this.decodeOne(msg, opts)) });
        } catch (err) {
          await this.failMessage(msg, opts, toEvalfleetError(err));
        }
      }
      if (ok.length === 0) return;
      try {
        await opts.handleBatch!(ok.map((o) => o.d));
        for (const o of ok) o.msg.ack();
        this.handled += ok.length;
        this.unblocked();
      } catch (err) {
        const e = toEvalfleetError(err);
        for (const o of ok) await this.failMessage(o.msg, opts, e);
      }
    } finally {
      this.inFlight -= msgs.length;
    }
  }

  private async failMessage<S extends z.ZodType>(
    msg: JsMsg,
    opts: ConsumeOptions<S>,
    err: EvalfleetError,
  ): Promise<void> {
    this.failed++;
    const attempts = msg.info.deliveryCount;
    const poison = err instanceof ValidationError || (!err.retryable && attempts >= (opts.maxAttempts ?? 5));
    if (poison) {
      this.log.warn({ subject: msg.subject, code: err.code, err: err.message }, "terminating poison message");
      // nats-server 2.9 redelivers after term(reason), so plain term().
      msg.term();
      await opts
        .onPoison?.(msg.data, msg.subject, err)
        .catch((e) => this.log.error({ err: e }, "poison event failed"));
      return;
    }
    const delay = retryDelayMs(err, attempts);
    if (err.code === ErrorCode.StorageFull) this.holdUp(err.message);
    else
      this.log.warn(
        { subject: msg.subject, code: err.code, err: err.message, attempts, delay },
        "handler failed; will retry",
      );
    msg.nak(delay);
  }

  /**
   * JetStream has no room: every write fails alike, so say it once (and in the heartbeat, which `status` shows once
   * a write gets through again), not once per message; the messages wait and are tried again.
   */
  private holdUp(why: string): void {
    if (this.blocked === undefined)
      this.log.error({ actor: this.name }, `${this.name} is held up, taking no new work: ${why}`);
    this.blocked = why;
    this.blockedAtMs = Date.now();
  }

  private async loopEnded(consumer: string, err: unknown): Promise<void> {
    if (this._state !== "running" && this._state !== "starting") return;
    const why = err
      ? `the ${consumer} consume loop failed: ${err instanceof Error ? err.message : String(err)}`
      : `the ${consumer} consume loop ended while the actor was running`;
    this.log.error({ err, consumer }, why);
    await this.fail(why);
  }

  /** Stop taking work because the actor can no longer do it: state `failed`, `stopped` resolves with the cause. */
  async fail(cause: string): Promise<void> {
    if (this._state === "stopped" || this._state === "failed") return;
    this._state = "failed";
    for (const s of this.subs) s.stop();
    this.abort.abort(new EvalfleetError(ErrorCode.Unavailable, cause));
    await this.heartbeat();
    clearInterval(this.heartbeatTimer);
    this.resolveStopped(`failed: ${cause}`);
  }

  private unblocked(): void {
    if (this.blocked === undefined) return;
    this.log.info(
      { actor: this.name, heldUpMs: Date.now() - this.blockedAtMs },
      `${this.name} takes work again (JetStream has room)`,
    );
    this.blocked = undefined;
  }

  /** Publish a run event (the user-visible log of a run). */
  async publishEvent(ev: Omit<RunEvent, "type" | "at">): Promise<void> {
    const event: RunEvent = { type: MessageTypes.runEvent, at: new Date().toISOString(), ...ev };
    await this.plane.js.publish(Subjects.events.run(ev.run), JSON.stringify(event));
  }

  private async heartbeat(): Promise<void> {
    const hb: Heartbeat = {
      type: MessageTypes.heartbeat,
      actor: this.name,
      id: this.id,
      state: this._state,
      pid: process.pid,
      host: hostname(),
      startedAt: this.startedAt,
      at: new Date().toISOString(),
      handled: this.handled,
      failed: this.failed,
      ...(this.blocked ? { blocked: this.blocked } : {}),
    };
    try {
      await this.plane.kv.progress.put(ProgressKeys.actor(this.name, this.id), JSON.stringify(hb));
    } catch (err) {
      this.log.debug({ err }, "heartbeat failed");
    }
  }

  /**
   * Stop taking new messages, let in-flight handlers finish until `deadlineMs`, then abort them (their messages are
   * redelivered to another replica since they were never acked).
   */
  async drain(deadlineMs = 10_000, cause = "drained"): Promise<string> {
    if (this._state === "stopped" || this._state === "draining" || this._state === "failed")
      return await this.stopped;
    this._state = "draining";
    await this.heartbeat();
    for (const s of this.subs) s.stop();
    for (const u of this.unwatch) u();
    const deadline = Date.now() + deadlineMs;
    while (this.inFlight > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
    this.abort.abort(new EvalfleetError("EF_UNAVAILABLE", "actor draining"));
    await Promise.race([Promise.allSettled(this.loops), new Promise((r) => setTimeout(r, 1_000))]);
    this._state = "stopped";
    await this.heartbeat();
    clearInterval(this.heartbeatTimer);
    this.resolveStopped(cause);
    return cause;
  }

  /** Stop now: in-flight work is abandoned (redelivered elsewhere). */
  async stop(cause = "stopped"): Promise<string> {
    return await this.drain(0, cause);
  }
}
