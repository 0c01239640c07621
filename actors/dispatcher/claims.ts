import type { KV } from "@nats-io/kv";
import { type Entry, TypedKv } from "../../plane/kv.js";
import { type CellLaunch, CellLaunchSchema, type Claim, ClaimSchema } from "../../protocol/state.js";
import { StateKeys } from "../../protocol/subjects.js";

export type { CellLaunch, Claim } from "../../protocol/state.js";

/** Attempt claims and per-cell launch records in the `budgets` bucket (schemas in protocol/state.ts). */
export class Claims {
  private readonly claims: TypedKv<typeof ClaimSchema>;
  private readonly cells: TypedKv<typeof CellLaunchSchema>;

  constructor(kv: KV) {
    this.claims = new TypedKv(kv, ClaimSchema, "attempt claim");
    this.cells = new TypedKv(kv, CellLaunchSchema, "cell launch record");
  }

  async get(run: string, cell: string, attempt: number): Promise<{ claim: Claim; revision: number } | null> {
    return asClaim(await this.claims.get(StateKeys.claim(run, cell, attempt)));
  }

  /** True when this caller now owns the attempt; false when someone claimed it first. */
  async create(run: string, cell: string, attempt: number, claim: Claim): Promise<boolean> {
    return (await this.claims.create(StateKeys.claim(run, cell, attempt), claim)) !== null;
  }

  /** Take over a claim whose owner died before launching (compare-and-set on its revision). */
  async takeOver(
    run: string,
    cell: string,
    attempt: number,
    claim: Claim,
    revision: number,
  ): Promise<boolean> {
    return (await this.claims.update(StateKeys.claim(run, cell, attempt), claim, revision)) !== null;
  }

  async launched(run: string, cell: string, attempt: number, claim: Claim): Promise<void> {
    await this.claims.put(StateKeys.claim(run, cell, attempt), claim);
  }

  async cell(run: string, cell: string): Promise<CellLaunch | null> {
    return (await this.cells.get(StateKeys.cellLaunch(run, cell)))?.value ?? null;
  }

  async setCell(run: string, cell: string, value: CellLaunch): Promise<void> {
    await this.cells.put(StateKeys.cellLaunch(run, cell), value);
  }
}

function asClaim(e: Entry<Claim> | null): { claim: Claim; revision: number } | null {
  return e ? { claim: e.value, revision: e.revision } : null;
}
