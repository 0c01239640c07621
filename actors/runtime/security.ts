/**
 * Nothing forged lands. A harness runs model-written code; if it ever reaches NATS (a subverted task, a leaked
 * credential), what it publishes must still not become a result: the actors that land or act on results check
 * (1) that the dispatcher claimed the attempt a result or ledger call names — claims are created once, before
 * launch, in KV `budgets` `claim.<run>.<cell>.<attempt>`, and never deleted — and (2) that every blob a result or
 * job names is under the attempt's own prefix. Each refusal is a security event: a row in `security_events`
 * (counted in the run's progress key, so `watch` shows it, and listed by the report) and a `security` event on
 * `events.<run>`.
 */
import type { KV } from "@nats-io/kv";
import type { Logger } from "../../lib/log.js";
import type { SecurityCheck } from "../../protocol/messages.js";
import { ClaimSchema } from "../../protocol/state.js";
import { BlobNames, StateKeys } from "../../protocol/subjects.js";
import type { Db } from "../../store/db.js";
import { insertSecurityEvents, type SecurityEventRow } from "../../store/security.js";
import type { Actor } from "./actor.js";

const CACHE_LIMIT = 200_000;

/**
 * Has the dispatcher claimed this attempt, and with which first attempt of its submission (the claim's `base`, that
 * retries count from)? Claims never disappear nor change their base, so a yes is remembered.
 */
export class ClaimedAttempts {
  private readonly known = new Map<string, number>();

  constructor(private readonly budgets: KV) {}

  async has(run: string, cell: string, attempt: number): Promise<boolean> {
    return (await this.base(run, cell, attempt)) !== undefined;
  }

  /** The claim's base (its submission's first attempt); undefined when the attempt was never claimed. */
  async base(run: string, cell: string, attempt: number): Promise<number | undefined> {
    const key = StateKeys.claim(run, cell, attempt);
    const hit = this.known.get(key);
    if (hit !== undefined) return hit;
    const e = await this.budgets.get(key);
    if (e === null || e.operation !== "PUT" || e.length === 0) return undefined;
    let raw: unknown = null;
    try {
      raw = e.json();
    } catch {
      // not JSON: still a claim
    }
    const claim = ClaimSchema.safeParse(raw);
    // A claim this version cannot read still says the attempt was claimed; its retries count from 0 then.
    const base = claim.success ? claim.data.base : 0;
    if (this.known.size >= CACHE_LIMIT) this.known.clear();
    this.known.set(key, base);
    return base;
  }

  /** The subset of `items` whose attempt was claimed, and the rest (each distinct attempt looked up once). */
  async split<T extends { run: string; cellId: string; attempt: number }>(
    items: readonly T[],
  ): Promise<{ claimed: T[]; unclaimed: T[] }> {
    const verdicts = new Map<string, Promise<boolean>>();
    for (const i of items) {
      const k = StateKeys.claim(i.run, i.cellId, i.attempt);
      if (!verdicts.has(k)) verdicts.set(k, this.has(i.run, i.cellId, i.attempt));
    }
    const resolved = new Map<string, boolean>();
    for (const [k, p] of verdicts) resolved.set(k, await p);
    const claimed: T[] = [];
    const unclaimed: T[] = [];
    for (const i of items)
      (resolved.get(StateKeys.claim(i.run, i.cellId, i.attempt)) ? claimed : unclaimed).push(i);
    return { claimed, unclaimed };
  }
}

/** A blob reference that is not the attempt's own: the name, for the event; null when every reference is fine. */
export function foreignBlobRef(
  key: { run: string; cellId: string; attempt: number },
  refs: ReadonlyArray<string | null | undefined>,
): string | null {
  for (const r of refs)
    if (r !== null && r !== undefined && !BlobNames.ownedBy(r, key.run, key.cellId, key.attempt)) return r;
  return null;
}

/** One refusal, as the actor that made it reports it. */
export interface Refusal {
  run: string;
  cellId: string;
  attempt: number;
  check: SecurityCheck;
  /** what was refused (unique per check and attempt): `result`, a call id, a blob name */
  ref: string;
  message: string;
}

/**
 * Record refusals (idempotently) and announce the new ones as `security` events. The row is written first: an
 * event lost to a crash is not re-sent, but the count the user sees is never short.
 */
export async function reportRefusals(
  opts: { db: Db; actor: Actor; log: Logger },
  refusals: readonly Refusal[],
): Promise<void> {
  if (refusals.length === 0) return;
  const rows: SecurityEventRow[] = refusals.map((r) => ({
    runName: r.run,
    check: r.check,
    cellId: r.cellId,
    attempt: r.attempt,
    ref: r.ref,
    actor: opts.actor.name,
    detail: r.message,
  }));
  const fresh = await insertSecurityEvents(opts.db, rows);
  for (const r of refusals)
    opts.log.warn({ run: r.run, cell: r.cellId, attempt: r.attempt, check: r.check }, r.message);
  if (fresh === 0) return;
  await Promise.all(
    refusals.map((r) =>
      opts.actor
        .publishEvent({
          run: r.run,
          kind: "security",
          message: r.message,
          data: { check: r.check, cellId: r.cellId, attempt: r.attempt, ref: r.ref, actor: opts.actor.name },
        })
        .catch((err) => opts.log.error({ err }, "security event failed")),
    ),
  );
}
