/**
 * The dispatcher ↔ task contract: the job reference every launch backend hands a harness task (nothing else — the
 * task fetches the rest), the environment variables that carry it, and the lines a task writes for its host.
 */

/** What a task is told about its job: which run, cell and attempt, and which pool it draws admission from. */
export interface JobRef {
  runName: string;
  cellId: string;
  attempt: number;
  pool: string;
}

/** The environment variables that carry a job reference into a task (every backend uses the same names). */
export const JobRefEnv = {
  run: "EVALFLEET_RUN",
  cell: "EVALFLEET_CELL",
  attempt: "EVALFLEET_ATTEMPT",
  pool: "EVALFLEET_POOL",
} as const;

/**
 * The line a task writes on stderr when it starts a harness in a process group of its own: a backend that hosts
 * tasks as local processes kills that group when the task dies, since a SIGKILLed task cannot.
 */
export const HARNESS_GROUP_LINE = "evalfleet-task: harness process group ";

const HARNESS_GROUP_RE = new RegExp(`${HARNESS_GROUP_LINE}(\\d+)`, "g");

export function harnessGroupsIn(text: string): number[] {
  return [...text.matchAll(HARNESS_GROUP_RE)].map((m) => Number(m[1]));
}
