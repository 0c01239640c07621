import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import type { KV } from "@nats-io/kv";
import { createInbox, type Msg, type NatsConnection, type Subscription } from "@nats-io/transport-node";
import { type Logger, silentLogger } from "../lib/log.js";
import { isConflict, isValue, TypedKv } from "../plane/kv.js";
import { openBucket } from "../plane/topology.js";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import type { ActualUsage, Admission, AdmissionRequest, LimitObservation, Pacer } from "../protocol/pacer.js";
import { type PacerOwnerRecord, PacerOwnerSchema } from "../protocol/state.js";
import { StateKeys } from "../protocol/subjects.js";
import { Buckets } from "../protocol/topology.js";
import { type Cost, PoolBucket, type PoolLimits } from "./bucket.js";
import { parseRateLimitHeaders, type RateLimitFacts } from "./headers.js";
import { abortError, estimateCost, type PacerPools, poolConfig } from "./local.js";
import { Pool } from "./pool.js";

/*
 * The fleet-wide pacer: ONE OWNER PER POOL, with the `pacer` KV key as its lease and checkpoint.
 *
 * Why not leasing batches of tokens to each process: a pool is four buckets plus a 429 pause, a 529 back-off,
 * discovered limits and settle corrections that can be negative. Leased batches fragment all of that — every
 * process would hold part of each bucket, a 429 seen by one must drain the others' leases, and at low rates
 * (an Anthropic tier-1 pool is under one request per second) a batch is either one token or unfair. One owner keeps
 * a single exact bucket and one FIFO queue, so the fleet's rate is the bucket's rate and waits are first come,
 * first served across processes. The cost is one request/reply per admission (~0.25 ms here) and a ceiling near
 * the owner's message rate, far above any provider key's request rate.
 *
 * Liveness: the owner rewrites its record every heartbeatMs with compare-and-set on the revision; if that write
 * fails it has been replaced and steps down. A contender takes over when the revision it sees has not moved for
 * leaseMs by its OWN monotonic clock (no cross-machine clock skew involved), by CAS on that revision, so exactly
 * one wins. An owner that cannot heartbeat stops granting before a successor could start. A clean close releases
 * the record so a successor takes over at once.
 *
 * Tokens of a process that dies come back: clients hold no tokens (they hold admissions whose estimate was
 * charged, as the provider charges a call in flight), and a dead owner's bucket is rebuilt by its successor from
 * the checkpoint (limits, pause), starting empty — the rate is back immediately, only one burst is forgone, and the
 * provider's bucket can never be overrun by the handover.
 *
 * Wire: requests go to the owner's private inbox, published in the record — no subject is named outside protocol/.
 * admit is request/reply (the owner answers when the tokens are there; the client re-sends the same id every
 * requestTimeoutMs, which also finds a new owner); settle, refund, cancel and observe are fire-and-forget publishes.
 */

export interface FleetPacerOptions extends PacerPools {
  nc: NatsConnection;
  /** May this process own pools (default true). Shims at fleet scale pass false; gateways and actors own. */
  canOwn?: boolean;
  leaseMs?: number;
  heartbeatMs?: number;
  requestTimeoutMs?: number;
  log?: Logger;
  /** Process id written into the owner record (default: a UUID). */
  id?: string;
  /**
   * How long admit waits for a pool that has no live owner (none, or one that stopped heartbeating) before it fails
   * with a clear error (default 15 s). A process that may own pools takes such a pool over at once; this bounds the
   * wait of one that may not, or cannot (NATS or the pacer bucket unavailable).
   */
  ownerWaitMs?: number;
}

/** A pool's owner lease and checkpoint in the `pacer` bucket (schema: protocol/state.ts). */
export type OwnerRecord = PacerOwnerRecord;

type Wire =
  | { op: "admit"; id: string; i: number; o: number }
  | { op: "settle"; est: [number, number]; act: [number, number, number, number] }
  | { op: "refund"; est: [number, number] }
  | { op: "cancel"; id: string; i: number; o: number }
  | { op: "observe"; status: number; facts: RateLimitFacts };

interface Owned {
  pool: Pool;
  sub: Subscription;
  inbox: string;
  rev: number;
  lastBeatOkMs: number;
  beating: boolean;
  /** Latest request message per waiting id (a re-send replaces it). */
  waiting: Map<string, Msg>;
  /** Recently granted ids, so a re-sent admit whose reply was lost is answered, not charged twice. */
  granted: Map<string, number>;
}

interface Link {
  name: string;
  key: string;
  rev: number;
  record: OwnerRecord | null;
  revSeenMs: number;
  owned: Owned | null;
  resolving: Promise<void> | null;
}

const enc = (v: unknown) => JSON.stringify(v);

/** admit's answer when a pool stayed without a live owner: what is wrong and what to do. */
function noOwner(pool: string, waitedMs: number, canOwn: boolean): EvalfleetError {
  const waited = `${Math.round(waitedMs / 1000)} s`;
  return new EvalfleetError(
    ErrorCode.Unavailable,
    canOwn
      ? `pacer: pool ${JSON.stringify(pool)} has had no live owner for ${waited} and this process could not take it over (is NATS up, with the pacer bucket?); check NATS, or run without the fleet pacer (EVALFLEET_PACER=none)`
      : `pacer: pool ${JSON.stringify(pool)} has had no live owner for ${waited} and this process may not own pools: start one that does (the gateway, or a task with EVALFLEET_PACER_OWN=1), or run without the fleet pacer (EVALFLEET_PACER=none)`,
  );
}
const GRANT_MEMORY_MS = 30_000;

export class FleetPacer implements Pacer {
  readonly id: string;
  private readonly links = new Map<string, Link>();
  private readonly log: Logger;
  private readonly leaseMs: number;
  private readonly heartbeatMs: number;
  private readonly requestTimeoutMs: number;
  private readonly ownerWaitMs: number;
  private readonly canOwn: boolean;
  private readonly timer: NodeJS.Timeout;
  private closed = false;
  private seq = 0;
  private readonly owners: TypedKv<typeof PacerOwnerSchema>;

  private constructor(
    private readonly opts: FleetPacerOptions,
    private readonly kv: KV,
  ) {
    this.id = opts.id ?? randomUUID();
    this.log = opts.log ?? silentLogger();
    this.leaseMs = opts.leaseMs ?? 1500;
    this.heartbeatMs = opts.heartbeatMs ?? 250;
    this.requestTimeoutMs = opts.requestTimeoutMs ?? 2000;
    this.ownerWaitMs = opts.ownerWaitMs ?? 15_000;
    this.canOwn = opts.canOwn ?? true;
    this.owners = new TypedKv(kv, PacerOwnerSchema, "pacer pool record");
    this.timer = setInterval(() => this.tick(), this.heartbeatMs);
    this.timer.unref();
  }

  static async open(opts: FleetPacerOptions): Promise<FleetPacer> {
    return new FleetPacer(opts, await openBucket(opts.nc, Buckets.pacer));
  }

  private now(): number {
    return performance.now();
  }

  /** Pools this process owns right now (tests and the bench use it to pick whom to kill). */
  ownedPools(): string[] {
    return [...this.links.values()].filter((l) => l.owned).map((l) => l.name);
  }

  /** The pool's last checkpoint as the KV holds it: limits, pause and settle statistics, from any process. */
  async poolRecord(pool: string): Promise<OwnerRecord | null> {
    return (await this.owners.get(StateKeys.pacerPool(pool)))?.value ?? null;
  }

  async admit(req: AdmissionRequest, signal?: AbortSignal): Promise<Admission> {
    const link = this.link(req.pool);
    const cost = estimateCost(req);
    const id = `${this.id}.${++this.seq}`;
    const startMs = this.now();
    // Since when the pool has had no live owner, as far as this process has seen: never waited on without bound.
    let ownerlessSince: number | null = null;
    for (;;) {
      if (this.closed) throw new Error("pacer closed");
      if (signal?.aborted) {
        this.send(link, { op: "cancel", id, i: cost.inputTokens, o: cost.outputTokens });
        throw abortError(signal);
      }
      if (link.owned || (link.record?.owner && this.now() - link.revSeenMs < this.leaseMs))
        ownerlessSince = null;
      else if (ownerlessSince === null)
        // An owner that stopped beating has been gone since its lease ran out (if that was after we began).
        ownerlessSince = link.record?.owner ? Math.max(startMs, link.revSeenMs + this.leaseMs) : this.now();
      // Every wait below is cut at what is left of the bound, so it holds even when NATS does not answer at all.
      const left =
        ownerlessSince === null ? Number.POSITIVE_INFINITY : this.ownerWaitMs - (this.now() - ownerlessSince);
      if (left <= 0) {
        this.send(link, { op: "cancel", id, i: cost.inputTokens, o: cost.outputTokens });
        throw noOwner(req.pool, this.ownerWaitMs, this.canOwn);
      }
      if (link.owned) {
        if (await this.admitLocal(link.owned, id, cost, signal)) return this.admission(link, cost, startMs);
        continue; // handed off: the pool changed owner while we waited
      }
      const inbox = link.record?.owner ? link.record.inbox : null;
      if (!inbox) {
        await within(this.resolve(link), left);
        if (!link.owned && !link.record?.owner)
          await sleep(Math.min(left, this.canOwn ? 50 : 250 + Math.random() * 250), signal);
        continue;
      }
      const outcome = await this.requestAdmit(inbox, id, cost, signal, Math.min(this.requestTimeoutMs, left));
      if (outcome === "ok") return this.admission(link, cost, startMs);
      if (outcome === "aborted") continue;
      if (outcome === "gone") await sleep(20, signal);
      await within(this.resolve(link, true), left);
    }
  }

  private async requestAdmit(
    inbox: string,
    id: string,
    cost: Cost,
    signal: AbortSignal | undefined,
    timeoutMs: number,
  ): Promise<"ok" | "redirect" | "gone" | "timeout" | "aborted"> {
    const body: Wire = { op: "admit", id, i: cost.inputTokens, o: cost.outputTokens };
    const req = this.opts.nc.request(inbox, enc(body), { timeout: Math.max(1, Math.round(timeoutMs)) });
    let onAbort: (() => void) | undefined;
    const aborted = new Promise<"aborted">((resolve) => {
      onAbort = () => resolve("aborted");
      signal?.addEventListener("abort", onAbort, { once: true });
    });
    try {
      const r = await Promise.race([req.then((m) => m.json<{ ok?: 1; redirect?: 1 }>()), aborted]);
      if (r === "aborted") {
        req.catch(() => {});
        return "aborted";
      }
      return r.ok ? "ok" : "redirect";
    } catch (err) {
      return /no responders|503/i.test(String((err as Error)?.message)) ? "gone" : "timeout";
    } finally {
      if (onAbort) signal?.removeEventListener("abort", onAbort);
    }
  }

  private admitLocal(owned: Owned, id: string, cost: Cost, signal?: AbortSignal): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      const onAbort = () => {
        if (owned.pool.cancel(id)) resolve(false);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      owned.pool.enqueue({
        id,
        cost,
        enqueuedMs: this.now(),
        grant: () => {
          signal?.removeEventListener("abort", onAbort);
          resolve(true);
        },
        handOff: () => {
          signal?.removeEventListener("abort", onAbort);
          resolve(false);
        },
      });
    });
  }

  private admission(link: Link, cost: Cost, startMs: number): Admission {
    let done = false;
    return {
      waitedMs: Math.round(this.now() - startMs),
      settle: (actual: ActualUsage) => {
        if (done) return;
        done = true;
        this.send(link, {
          op: "settle",
          est: [cost.inputTokens, cost.outputTokens],
          act: [actual.inputTokens, actual.outputTokens, actual.cacheReadTokens, actual.cacheWriteTokens],
        });
      },
      refund: () => {
        if (done) return;
        done = true;
        this.send(link, { op: "refund", est: [cost.inputTokens, cost.outputTokens] });
      },
    };
  }

  observe(obs: LimitObservation): void {
    const facts = parseRateLimitHeaders(obs.headers);
    const informative = obs.status === 429 || obs.status === 529 || Object.keys(facts.dims).length > 0;
    const link = this.link(obs.pool);
    // A plain 2xx only matters to end a 529 back-off streak; otherwise it is not worth a message.
    if (!informative && !link.owned && !((link.record?.checkpoint.overloadStreak ?? 0) > 0)) return;
    this.send(link, { op: "observe", status: obs.status, facts });
  }

  /** Deliver a fire-and-forget operation to the owner: in-process when we own the pool, else to its inbox. */
  private send(link: Link, w: Wire): void {
    if (link.owned) {
      this.apply(link.owned, w);
      return;
    }
    const inbox = link.record?.owner ? link.record.inbox : null;
    if (inbox) {
      this.opts.nc.publish(inbox, enc(w));
      return;
    }
    // No owner known yet: find one, then deliver (at most once; a lost settle is corrected by the next 429).
    this.resolve(link).then(
      () => {
        if (link.owned || link.record?.owner) this.send(link, w);
      },
      () => {},
    );
  }

  private apply(owned: Owned, w: Wire, msg?: Msg): void {
    const pool = owned.pool;
    switch (w.op) {
      case "admit": {
        if (!msg) return;
        if (owned.granted.has(w.id)) {
          msg.respond(enc({ ok: 1 }));
          return;
        }
        const queued = owned.waiting.has(w.id);
        owned.waiting.set(w.id, msg);
        if (queued) return;
        pool.enqueue({
          id: w.id,
          cost: { requests: 1, inputTokens: w.i, outputTokens: w.o },
          enqueuedMs: this.now(),
          grant: () => {
            const m = owned.waiting.get(w.id);
            owned.waiting.delete(w.id);
            owned.granted.set(w.id, this.now() + GRANT_MEMORY_MS);
            m?.respond(enc({ ok: 1 }));
          },
          handOff: () => {
            const m = owned.waiting.get(w.id);
            owned.waiting.delete(w.id);
            m?.respond(enc({ redirect: 1 }));
          },
        });
        return;
      }
      case "settle": {
        const [inputTokens, outputTokens, cacheReadTokens, cacheWriteTokens] = w.act;
        const est = { requests: 1, inputTokens: w.est[0], outputTokens: w.est[1] };
        pool.adjust(pool.settleStats(est, { inputTokens, outputTokens, cacheReadTokens, cacheWriteTokens }));
        return;
      }
      case "refund":
        pool.adjust({ requests: 1, inputTokens: w.est[0], outputTokens: w.est[1] });
        return;
      case "cancel":
        owned.waiting.delete(w.id);
        if (!pool.cancel(w.id) && owned.granted.delete(w.id)) {
          // Granted, but the caller had already given up: the call never happened.
          pool.adjust({ requests: 1, inputTokens: w.i, outputTokens: w.o });
        }
        return;
      case "observe":
        pool.observe(w.status, w.facts);
        return;
    }
  }

  private link(name: string): Link {
    let l = this.links.get(name);
    if (!l) {
      l = {
        name,
        key: StateKeys.pacerPool(name),
        rev: 0,
        record: null,
        revSeenMs: 0,
        owned: null,
        resolving: null,
      };
      this.links.set(name, l);
    }
    return l;
  }

  /** Re-read the pool's record; take the pool over when it has no live owner and this process may own it. */
  private resolve(link: Link, _afterFailure = false): Promise<void> {
    if (!link.resolving) {
      link.resolving = this.doResolve(link).finally(() => {
        link.resolving = null;
      });
    }
    return link.resolving;
  }

  private async doResolve(link: Link): Promise<void> {
    if (this.closed || link.owned) return;
    let entry: Awaited<ReturnType<KV["get"]>>;
    try {
      entry = await this.kv.get(link.key);
    } catch (err) {
      this.log.warn({ err, pool: link.name }, "pacer: reading the pool record failed");
      return;
    }
    const exists = isValue(entry);
    const rev = entry?.revision ?? 0;
    if (rev !== link.rev) {
      link.rev = rev;
      link.revSeenMs = this.now();
    }
    try {
      link.record = isValue(entry) ? this.owners.decode(entry) : null;
    } catch (err) {
      this.log.warn({ err, pool: link.name }, "pacer: the pool record is not one this version reads");
      return;
    }
    if (!this.canOwn) return;
    const free = !link.record?.owner;
    const stale = this.now() - link.revSeenMs >= this.leaseMs;
    if (free || stale || link.record?.owner === this.id) await this.acquire(link, entry && exists ? rev : 0);
  }

  private async acquire(link: Link, rev: number): Promise<void> {
    const nowMs = this.now();
    const cfg = poolConfig(this.opts, link.name);
    const prev = link.record;
    const bucket = prev
      ? PoolBucket.restore(cfg, prev.checkpoint, nowMs, Date.now())
      : new PoolBucket(cfg, nowMs);
    const pool = new Pool(bucket, () => this.now());
    const inbox = createInbox();
    const owned: Owned = {
      pool,
      inbox,
      sub: null as unknown as Subscription,
      rev: 0,
      lastBeatOkMs: nowMs,
      beating: false,
      waiting: new Map(),
      granted: new Map(),
    };
    // Subscribe before publishing the record, so the first request that reads it finds us listening.
    owned.sub = this.opts.nc.subscribe(inbox, {
      callback: (err, msg) => {
        if (err || link.owned !== owned) return;
        try {
          this.apply(owned, msg.json<Wire>(), msg);
        } catch (e) {
          this.log.warn({ err: e, pool: link.name }, "pacer: bad message to the pool owner");
        }
      },
    });
    const record = this.record(owned, inbox);
    try {
      await this.opts.nc.flush();
      owned.rev =
        rev === 0
          ? await this.kv.create(link.key, enc(record))
          : await this.kv.update(link.key, enc(record), rev);
    } catch {
      owned.sub.unsubscribe(); // someone else won the race (or the server is away): stay a client
      pool.close();
      return;
    }
    owned.lastBeatOkMs = nowMs;
    link.owned = owned;
    link.rev = owned.rev;
    link.record = record;
    link.revSeenMs = this.now();
    this.log.info({ pool: link.name, owner: this.id, restored: prev !== null }, "pacer: owning pool");
  }

  private record(owned: Owned, inbox: string | null): OwnerRecord {
    const nowMs = this.now();
    return {
      v: 1,
      owner: inbox ? this.id : null,
      inbox,
      heartbeatWallMs: Date.now(),
      checkpoint: owned.pool.bucket.checkpoint(nowMs, Date.now()),
      stats: owned.pool.stats(),
    };
  }

  private tick(): void {
    for (const link of this.links.values()) {
      if (link.owned) this.beat(link, link.owned);
      else if (this.canOwn) void this.resolve(link);
    }
  }

  private beat(link: Link, owned: Owned): void {
    const nowMs = this.now();
    for (const [id, until] of owned.granted) if (until < nowMs) owned.granted.delete(id);
    // A successor may start leaseMs after our last successful write; stop granting well before that.
    if (nowMs - owned.lastBeatOkMs > this.leaseMs - this.heartbeatMs) {
      this.log.warn({ pool: link.name }, "pacer: could not renew the pool lease in time; stepping down");
      this.stepDown(link, owned);
      return;
    }
    if (owned.beating) return;
    owned.beating = true;
    const sentMs = nowMs;
    const record = this.record(owned, owned.inbox);
    this.kv.update(link.key, enc(record), owned.rev).then(
      (rev) => {
        owned.beating = false;
        if (link.owned !== owned) return;
        owned.rev = rev;
        owned.lastBeatOkMs = sentMs;
        link.rev = rev;
        link.record = record;
        link.revSeenMs = this.now();
      },
      (err: unknown) => {
        owned.beating = false;
        if (link.owned !== owned) return;
        // A stale revision: another process holds the pool now.
        if (isConflict(err)) {
          this.log.warn({ pool: link.name }, "pacer: pool taken over by another process; stepping down");
          this.stepDown(link, owned);
        } else this.log.warn({ pool: link.name, err }, "pacer: lease renewal failed");
      },
    );
  }

  private stepDown(link: Link, owned: Owned): void {
    link.owned = null;
    link.record = null;
    owned.sub.unsubscribe();
    owned.pool.close();
    for (const w of owned.pool.takeAll()) w.handOff?.();
  }

  /** Release owned pools (a successor takes over at once) and stop. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.timer);
    const releases: Promise<unknown>[] = [];
    for (const link of this.links.values()) {
      const owned = link.owned;
      if (!owned) continue;
      const record = this.record(owned, null);
      this.stepDown(link, owned);
      releases.push(this.kv.update(link.key, enc(record), owned.rev).catch(() => undefined));
    }
    await Promise.all(releases);
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** Wait for `p`, but no longer than `ms` (it goes on in the background; its failures are its own to log). */
function within(p: Promise<void>, ms: number): Promise<void> {
  if (!Number.isFinite(ms)) return p;
  let t: NodeJS.Timeout | undefined;
  const timer = new Promise<void>((resolve) => {
    t = setTimeout(resolve, Math.max(0, ms));
  });
  return Promise.race([p, timer]).finally(() => clearTimeout(t));
}

export type { PoolLimits };
