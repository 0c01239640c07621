/**
 * The launch-backend contract the dispatcher drives: `local` (processes), `sim` (tests) and `ecs` (Fargate) all
 * implement it. A backend starts a task from a job *reference* only — the task pulls the rest — and reports what
 * happened to it in one vocabulary, so the dispatcher's retry rules never depend on where a task ran.
 */

/** What a task is told about its job: which run, cell and attempt, and which pool it draws admission from. */
export interface JobRef {
  runName: string;
  cellId: string;
  attempt: number;
  pool: string;
}

/**
 * Why a task stopped. `exited` means the harness ran and exited (the exit code is the model's business);
 * `retryable` and `fatal` are infrastructure outcomes. `neverStarted` marks a task whose container never ran,
 * which can never count as the model's failure.
 */
export type StopClass =
  | { kind: "exited"; exitCode: number }
  | { kind: "retryable"; reason: string; neverStarted: boolean }
  | { kind: "fatal"; reason: string; neverStarted: boolean };

export type TaskState = {
  ref: JobRef;
  handle: string;
  phase: "pending" | "running" | "stopped";
  stop?: StopClass;
};

export interface LaunchBackend {
  readonly name: string;
  /** Start one task per ref. Each result has a handle (started) or an error (not started; see its kind). */
  launch(
    refs: JobRef[],
    signal?: AbortSignal,
  ): Promise<Array<{ ref: JobRef; handle?: string; error?: StopClass }>>;
  /** Current state of the given tasks; handles the backend no longer knows are omitted. */
  observe(handles: string[]): Promise<TaskState[]>;
  /** Ask the tasks to stop; stopping a task that already stopped is not an error. */
  stop(handles: string[], reason: string): Promise<void>;
  /**
   * The handle of a task already running this attempt that this process did not launch — launched by a replica
   * that died before it could record the launch — or undefined when there is none or the backend cannot tell.
   */
  find?(ref: JobRef): Promise<string | undefined>;
  close(): Promise<void>;
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

/** Should the dispatcher launch this attempt again? Exits and fatal stops are final; retryable ones are bounded. */
export function shouldRetry(stop: StopClass, triesSoFar: number, maxTries: number): boolean {
  return stop.kind === "retryable" && triesSoFar < maxTries;
}
