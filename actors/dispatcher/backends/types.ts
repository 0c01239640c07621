/**
 * The launch-backend contract the dispatcher drives: `local` (processes), `sim` (tests) and `ecs` (Fargate) all
 * implement it. A backend starts a task from a job *reference* only — the task pulls the rest — and reports what
 * happened to it in one vocabulary, so the dispatcher's retry rules never depend on where a task ran.
 */
import type { JobRef } from "../../../protocol/task.js";

export type { JobRef };

/** One attempt's NATS credential, for its task alone (plane/nats-auth.ts `mintAttemptUser`). */
export interface TaskNatsCredential {
  jwt: string;
  seed: string;
  /** the `.creds` text of the two */
  creds: string;
}

/** What a backend launches: the job reference and, where the plane mints them, the attempt's NATS credential. */
export type LaunchRef = JobRef & { natsCredential?: TaskNatsCredential };

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
  /** its tasks connect to NATS on their own, so each attempt needs a NATS user minted for it (not the sim's) */
  readonly tasksConnect?: boolean;
  /** Start one task per ref. Each result has a handle (started) or an error (not started; see its kind). */
  launch(
    refs: LaunchRef[],
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

/** Should the dispatcher launch this attempt again? Exits and fatal stops are final; retryable ones are bounded. */
export function shouldRetry(stop: StopClass, triesSoFar: number, maxTries: number): boolean {
  return stop.kind === "retryable" && triesSoFar < maxTries;
}
