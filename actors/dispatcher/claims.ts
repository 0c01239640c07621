import type { KV } from "@nats-io/kv";
import { StateKeys } from "../../protocol/subjects.js";
import { isConflict } from "./book.js";

/** One attempt's claim: created once (a second create fails), so no attempt is ever launched twice. */
export interface Claim {
  by: string;
  /** the cell message (stream sequence) whose generation this attempt belongs to */
  gen: number;
  /** first attempt of the generation: retries count from it */
  base: number;
  pool: string;
  at: string;
  handle?: string;
  backend?: string;
  launchedAt?: string;
}

/** Per cell: the generation and attempt launched last, and whether the cell reached its final outcome. */
export interface CellLaunch {
  gen: number;
  base: number;
  latest: number;
  final: boolean;
  at: string;
}

export class Claims {
  constructor(private readonly kv: KV) {}

  async get(run: string, cell: string, attempt: number): Promise<{ claim: Claim; revision: number } | null> {
    const e = await this.kv.get(StateKeys.claim(run, cell, attempt));
    return e && e.length > 0 && e.operation === "PUT"
      ? { claim: e.json<Claim>(), revision: e.revision }
      : null;
  }

  /** True when this caller now owns the attempt; false when someone claimed it first. */
  async create(run: string, cell: string, attempt: number, claim: Claim): Promise<boolean> {
    try {
      await this.kv.create(StateKeys.claim(run, cell, attempt), JSON.stringify(claim));
      return true;
    } catch (err) {
      if (isConflict(err)) return false;
      throw err;
    }
  }

  /** Take over a claim whose owner died before launching (compare-and-set on its revision). */
  async takeOver(
    run: string,
    cell: string,
    attempt: number,
    claim: Claim,
    revision: number,
  ): Promise<boolean> {
    try {
      await this.kv.update(StateKeys.claim(run, cell, attempt), JSON.stringify(claim), revision);
      return true;
    } catch (err) {
      if (isConflict(err)) return false;
      throw err;
    }
  }

  async launched(run: string, cell: string, attempt: number, claim: Claim): Promise<void> {
    await this.kv.put(StateKeys.claim(run, cell, attempt), JSON.stringify(claim));
  }

  async cell(run: string, cell: string): Promise<CellLaunch | null> {
    const e = await this.kv.get(StateKeys.cellLaunch(run, cell));
    return e && e.length > 0 && e.operation === "PUT" ? e.json<CellLaunch>() : null;
  }

  async setCell(run: string, cell: string, value: CellLaunch): Promise<void> {
    await this.kv.put(StateKeys.cellLaunch(run, cell), JSON.stringify(value));
  }
}
