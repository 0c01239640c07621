/**
 * KV values read and written through their schemas (protocol/state.ts, protocol/messages.ts), and the one
 * compare-and-set loop. A value that does not match its schema is a ValidationError that names its bucket and key;
 * a conflict is decided by JetStream's error code (10071 wrong last sequence, 10164 its unknown-sequence twin),
 * never by the message's text.
 */
import { JetStreamApiCodes, JetStreamApiError } from "@nats-io/jetstream";
import type { KV, KvEntry } from "@nats-io/kv";
import type { z } from "zod";
import { retry } from "../lib/retry.js";
import { decodeJson } from "../protocol/decode.js";
import { ErrorCode, RetryableError } from "../protocol/errors.js";

/** A value and the revision it was read at (for a later update). */
export interface Entry<T> {
  value: T;
  revision: number;
}

/** An update with a stale revision, or a create of a key that exists. */
export function isConflict(err: unknown): boolean {
  return (
    err instanceof JetStreamApiError &&
    (err.code === JetStreamApiCodes.StreamWrongLastSequence ||
      err.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}

/** True when the entry holds a value (not a delete or purge marker, not empty). */
export function isValue(e: KvEntry | null): e is KvEntry {
  return e !== null && e.operation === "PUT" && e.length > 0;
}

/** One bucket's values of one kind. */
export class TypedKv<S extends z.ZodType> {
  constructor(
    readonly kv: KV,
    readonly schema: S,
    /** what a value is, for error texts ("budget state") */
    readonly what: string,
  ) {}

  /** Decode an entry read elsewhere (a watch, a keys() walk). */
  decode(e: KvEntry): z.output<S> {
    return decodeJson(this.schema, e.value, `${this.what} at ${e.bucket}/${e.key}`);
  }

  /** The value and its revision; null when the key holds none. */
  async get(key: string): Promise<Entry<z.output<S>> | null> {
    const e = await this.kv.get(key);
    return isValue(e) ? { value: this.decode(e), revision: e.revision } : null;
  }

  async put(key: string, value: z.output<S>): Promise<number> {
    return await this.kv.put(key, JSON.stringify(value));
  }

  /** The new revision; null when the key already holds a value. */
  async create(key: string, value: z.output<S>): Promise<number | null> {
    try {
      return await this.kv.create(key, JSON.stringify(value));
    } catch (err) {
      if (isConflict(err)) return null;
      throw err;
    }
  }

  /** The new revision; null when the key changed since `revision`. */
  async update(key: string, value: z.output<S>, revision: number): Promise<number | null> {
    try {
      return await this.kv.update(key, JSON.stringify(value), revision);
    } catch (err) {
      if (isConflict(err)) return null;
      throw err;
    }
  }

  async delete(key: string): Promise<void> {
    await this.kv.delete(key);
  }
}

/** What a compare-and-set step decides from the current entry: a value to write (or none), and its result. */
export interface CasStep<T, R> {
  /** undefined: write nothing (the current value stands) */
  write?: T;
  result: R;
}

class CasConflict extends Error {}

/**
 * Read, decide, write on the revision read (create when the key is empty); on a conflict read again and decide
 * again, after a short jittered pause, up to `tries` times. `decide` must be a pure function of the entry: it runs
 * once per try. Gives up with a retryable EF_CONFLICT naming the key.
 */
export async function compareAndSet<S extends z.ZodType, R>(
  kv: TypedKv<S>,
  key: string,
  decide: (current: Entry<z.output<S>> | null) => CasStep<z.output<S>, R> | Promise<CasStep<z.output<S>, R>>,
  opts: { tries?: number; signal?: AbortSignal } = {},
): Promise<R> {
  const tries = opts.tries ?? 50;
  try {
    return await retry(
      async () => {
        const current = await kv.get(key);
        const step = await decide(current);
        if (step.write === undefined) return step.result;
        const rev =
          current === null
            ? await kv.create(key, step.write)
            : await kv.update(key, step.write, current.revision);
        if (rev === null) throw new CasConflict();
        return step.result;
      },
      {
        tries,
        baseMs: 2,
        maxMs: 50,
        jitter: 1,
        retryError: (err) => err instanceof CasConflict,
        ...(opts.signal ? { signal: opts.signal } : {}),
      },
    );
  } catch (err) {
    if (!(err instanceof CasConflict)) throw err;
    throw new RetryableError(
      ErrorCode.Conflict,
      `${kv.what} at ${key}: compare-and-set lost to other writers ${tries} times in a row`,
    );
  }
}
