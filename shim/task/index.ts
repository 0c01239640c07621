export { goldFixFiles, libraryFixes } from "./gold.js";
export { fetchJob, fetchRunKey, type TaskJob } from "./job.js";
export { type CollectedPatch, collectPatch } from "./patch.js";
export { readTaskRef, type TaskRef } from "./ref.js";
export { attemptStatus, exitProblems, runPriceTable, sumTotals, usdToNanoUsd } from "./result.js";
export { HARNESS_DUMMY_KEY, type RunTaskOptions, runTask } from "./run.js";
export { planSessions, type SessionOutcome, type SessionSpec } from "./session.js";
export { type HarnessExit, superviseHarness } from "./supervise.js";
export {
  type AttemptDirs,
  attemptDirs,
  defaultMirrorRoot,
  defaultWorkRoot,
  localMirror,
  prepareWorkdir,
} from "./workdir.js";
