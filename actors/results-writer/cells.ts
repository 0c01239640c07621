import type { KV } from "@nats-io/kv";
import type { Logger } from "../../lib/log.js";
import { decodeJson } from "../../protocol/decode.js";
import { ValidationError } from "../../protocol/errors.js";
import { type CellWork, CellWorkSchema } from "../../protocol/messages.js";
import { StateKeys } from "../../protocol/subjects.js";

const CACHE_LIMIT = 50_000;

/**
 * The planner's per-cell record (`cell.<run>.<cell>` in the jobs bucket): harness, model, task, track, exemption.
 * An attempt result names only (run, cell, attempt), so the row's descriptive columns and the grade job's task id
 * come from here. Records never change for a cell id (the id encodes harness, model, task and repeat), so they are
 * cached; a missing or unreadable record is not cached and yields null (the row still lands).
 */
export class CellRecords {
  private readonly cache = new Map<string, CellWork>();

  constructor(
    private readonly jobs: KV,
    private readonly log: Logger,
  ) {}

  async get(run: string, cellId: string): Promise<CellWork | null> {
    const key = StateKeys.job(run, cellId);
    const hit = this.cache.get(key);
    if (hit) return hit;
    const entry = await this.jobs.get(key);
    if (entry?.operation !== "PUT" || entry.value.length === 0) {
      this.log.warn(
        { run, cell: cellId },
        "no cell record in the jobs bucket; row lands without task details",
      );
      return null;
    }
    let work: CellWork;
    try {
      work = decodeJson(CellWorkSchema, entry.value, "cell record");
    } catch (err) {
      if (!(err instanceof ValidationError)) throw err;
      this.log.warn({ run, cell: cellId, err: err.message }, "unreadable cell record");
      return null;
    }
    if (this.cache.size >= CACHE_LIMIT) this.cache.clear();
    this.cache.set(key, work);
    return work;
  }

  /** All records of a batch, fetched concurrently. */
  async getMany(keys: readonly { run: string; cellId: string }[]): Promise<Map<string, CellWork | null>> {
    const out = new Map<string, CellWork | null>();
    await Promise.all(
      keys.map(async (k) => {
        out.set(`${k.run}\u0000${k.cellId}`, await this.get(k.run, k.cellId));
      }),
    );
    return out;
  }
}
