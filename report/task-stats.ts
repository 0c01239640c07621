import { clusterBootstrap, type Interval } from "./bootstrap.js";
import { flipRate, meanOverTasks, passAtK, passHatK, pooledRate, type TaskTally, wilson } from "./stats.js";

/*
 * A group's figures over its tasks. With one scored attempt per task the attempts are independent and the
 * resolved rate gets a Wilson interval; with repeats, attempts of one task are correlated, so every interval is a
 * task-clustered bootstrap (whole tasks resampled) — narrower intervals from pooling repeats would overstate what
 * the run shows.
 */

/** pass@k or pass^k over the tasks with at least k attempts, with its task-bootstrap interval. */
export interface AtK {
  k: number;
  value: number | null;
  ci95: Interval | null;
  /** tasks with at least k scored attempts (the ones averaged) */
  tasks: number;
  excludedTasks: number;
}

export interface TaskFigures {
  resolvedCi95: { low: number; high: number } | null;
  /** how resolvedCi95 was computed */
  resolvedCiMethod: "wilson" | "task-bootstrap";
  passAtK: AtK;
  passHatK: AtK;
  /** how often repeats of one task disagree (null without repeats) */
  flip: { rate: number | null; mixedTasks: number; tasksWithRepeats: number };
}

const finite = (v: number): number | null => (Number.isFinite(v) ? v : null);

function atK(tasks: readonly TaskTally[], k: number, f: (n: number, c: number, k: number) => number): AtK {
  const eligible = tasks.filter((t) => t.n >= k);
  return {
    k,
    value: finite(meanOverTasks(eligible, k, f)),
    ci95: clusterBootstrap(eligible, (s) => meanOverTasks(s, k, f)),
    tasks: eligible.length,
    excludedTasks: tasks.length - eligible.length,
  };
}

export function taskFigures(tasks: readonly TaskTally[], k: number): TaskFigures {
  const scored = tasks.reduce((s, t) => s + t.n, 0);
  const resolved = tasks.reduce((s, t) => s + t.c, 0);
  const repeated = tasks.some((t) => t.n > 1);
  const boot = repeated ? clusterBootstrap(tasks, pooledRate) : null;
  return {
    resolvedCi95: repeated ? boot && { low: boot.low, high: boot.high ?? 1 } : wilson(resolved, scored),
    resolvedCiMethod: repeated ? "task-bootstrap" : "wilson",
    passAtK: atK(tasks, k, passAtK),
    passHatK: atK(tasks, k, passHatK),
    flip: flipRate(tasks),
  };
}
