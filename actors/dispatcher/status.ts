import type { Db } from "../../store/db.js";
import type { CellStatus } from "../../store/results.js";
import { type CellStatusRow, setCellStatuses } from "../../store/writer.js";

interface Waiter {
  row: CellStatusRow;
  resolve(): void;
  reject(err: unknown): void;
}

/**
 * run_state writes from the dispatcher (running at launch, skipped, failed by cancel), coalesced: marks made within
 * a few milliseconds go out as one multi-row upsert, so thousands of launches cost tens of statements. Each mark
 * resolves once its row is committed; within one batch the last mark of a cell wins.
 */
export class StatusWriter {
  private queue: Waiter[] = [];
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly db: Db,
    private readonly windowMs = 10,
    private readonly maxRows = 500,
  ) {}

  mark(runName: string, cellId: string, status: CellStatus, error: string | null = null): Promise<void> {
    return new Promise((resolve, reject) => {
      this.queue.push({
        row: { runName, cellId, status, error, at: new Date().toISOString() },
        resolve,
        reject,
      });
      if (this.queue.length >= this.maxRows) this.flush();
      else this.timer ??= setTimeout(() => this.flush(), this.windowMs);
    });
  }

  private flush(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.queue;
    this.queue = [];
    if (batch.length === 0) return;
    this.flushing = this.flushing.then(async () => {
      const last = new Map<string, CellStatusRow>();
      for (const w of batch) last.set(`${w.row.runName}\u0000${w.row.cellId}`, w.row);
      try {
        await setCellStatuses(this.db, [...last.values()]);
        for (const w of batch) w.resolve();
      } catch (err) {
        for (const w of batch) w.reject(err);
      }
    });
  }
}
