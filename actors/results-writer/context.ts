import type { Logger } from "../../lib/log.js";
import type { Plane } from "../../plane/connect.js";
import type { Db } from "../../store/db.js";
import type { Actor } from "../runtime/actor.js";
import type { ClaimedAttempts } from "../runtime/security.js";
import type { CellRecords } from "./cells.js";
import type { ProgressWriter } from "./progress.js";

/** The stream a batch came from. */
export type Feed = "attempts" | "ledger" | "grades" | "verdicts";

/** What every handler of the results-writer works with. */
export interface WriterContext {
  plane: Plane;
  db: Db;
  log: Logger;
  cells: CellRecords;
  progress: ProgressWriter;
  /** the dispatcher's claims: a result or call of an attempt never claimed is refused */
  claims: ClaimedAttempts;
  actor: Actor;
  /** Test seam: runs after a batch's transaction committed, before anything is published (crash injection). */
  afterCommit?: (feed: Feed) => Promise<void> | void;
}

export function cellKey(run: string, cellId: string): string {
  return `${run}\u0000${cellId}`;
}
