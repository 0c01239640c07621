/**
 * What a harness task is told: which attempt of which cell of which run. Everything else it fetches. The task
 * role's settings read it (flags, or the JobRefEnv variables every launch backend sets): config/task.ts.
 */
export interface TaskRef {
  run: string;
  cell: string;
  attempt: number;
}
