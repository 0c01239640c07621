export { fetchAttemptKey, fetchJob, type TaskJob } from "./job.js";
export { type CollectedPatch, collectPatch } from "./patch.js";
export type { TaskRef } from "./ref.js";
export { attemptStatus, exitProblems, runPriceTable, sumTotals } from "./result.js";
export { HARNESS_DUMMY_KEY, type RunTaskOptions, runTask } from "./run.js";
export { planSessions, type SessionOutcome, type SessionSpec } from "./session.js";
export { type HarnessExit, superviseHarness } from "./supervise.js";
export {
  type AttemptDirs,
  attemptDirs,
  localMirror,
  type PreparedWorkdir,
  prepareWorkdir,
  readyForSession,
} from "./workdir.js";
