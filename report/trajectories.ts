import { safeSlug } from "../protocol/names.js";
import { BlobNames } from "../protocol/subjects.js";
import type { TrajectoryCall, TrajectoryCell } from "../store/trajectories.js";
import { type AtifTrajectory, attemptToAtif } from "./atif.js";

/** Every attempt of every cell (retried ones included), as ATIF, with the file name each is written under. */
export async function* attemptTrajectories(opts: {
  run: string;
  cells: readonly TrajectoryCell[];
  calls: readonly TrajectoryCall[];
  /** the run config as the planner stored it (harness adapters and versions) */
  config: Record<string, unknown> | null;
  /** a blob's text, or null when it cannot be read */
  blob: (ref: string) => Promise<string | null>;
}): AsyncGenerator<{
  file: string;
  cellId: string;
  attempt: number;
  trajectory: AtifTrajectory;
  hadBlob: boolean;
}> {
  const byAttempt = new Map<string, TrajectoryCall[]>();
  for (const c of opts.calls) {
    const k = `${c.cellId}\u0000${c.attempt}`;
    const list = byAttempt.get(k) ?? [];
    list.push(c);
    byAttempt.set(k, list);
  }
  const harnesses = (opts.config?.harnesses ?? []) as Array<{
    name?: string;
    adapter?: string;
    version?: string;
  }>;
  for (const cell of opts.cells) {
    const spec = harnesses.find((h) => h.name === cell.harness);
    for (let attempt = 0; attempt <= cell.attempt; attempt++) {
      const text = await opts.blob(BlobNames.attempt(opts.run, cell.cellId, attempt, "trajectory.jsonl"));
      const latest = attempt === cell.attempt;
      const trajectory = attemptToAtif({
        run: opts.run,
        cellId: cell.cellId,
        attempt,
        harness: cell.harness ?? "unknown",
        adapter: spec?.adapter ?? null,
        harnessVersion: spec?.version ?? null,
        model: cell.model ?? "unknown",
        taskId: cell.taskId ?? cell.cellId,
        repeat: cell.repeat,
        // An earlier attempt was retried: its outcome is not the cell's.
        status: latest ? cell.status : "RETRIED",
        gradeStatus: latest ? cell.gradeStatus : null,
        resolved: latest ? cell.resolved : null,
        errorClass: latest ? cell.errorClass : null,
        calls: byAttempt.get(`${cell.cellId}\u0000${attempt}`) ?? [],
        trajectory: text,
      });
      yield {
        file: `${safeSlug(cell.cellId)}.attempt-${attempt}.json`,
        cellId: cell.cellId,
        attempt,
        trajectory,
        hadBlob: text !== null,
      };
    }
  }
}
