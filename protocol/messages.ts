import { z } from "zod";
import { COST_MODES, TIMEOUT_POLICIES, TRACKS } from "./config.js";

/**
 * Every message on the wire has a versioned `type`. A consumer that meets a type it does not know rejects it with
 * a reason instead of guessing; a new version gets a new type string.
 */
export const MessageTypes = {
  runEvent: "evalfleet.run.event.v1",
  cellWork: "evalfleet.cell.work.v1",
  attemptResult: "evalfleet.attempt.result.v1",
  ledgerCall: "evalfleet.ledger.call.v1",
  gradeJob: "evalfleet.grade.job.v1",
  gradeResult: "evalfleet.grade.result.v1",
  judgeJob: "evalfleet.judge.job.v1",
  verdict: "evalfleet.judge.verdict.v1",
  control: "evalfleet.control.v1",
  controlReply: "evalfleet.control.reply.v1",
  runProgress: "evalfleet.progress.run.v1",
  cellProgress: "evalfleet.progress.cell.v1",
  heartbeat: "evalfleet.progress.actor.v1",
} as const;

const Int = z.number().int().nonnegative();
const IsoTime = z.string().min(1);
const IssueSchema = z.object({ path: z.string(), reason: z.string() });

/** Token counts by kind, and their cost in integer nano-USD. */
export const UsageSchema = z.object({
  inputTokens: Int.default(0),
  outputTokens: Int.default(0),
  cacheReadTokens: Int.default(0),
  cacheWriteTokens: Int.default(0),
  reasoningTokens: Int.default(0),
  costNanoUsd: Int.default(0),
  calls: Int.default(0),
});
export type Usage = z.output<typeof UsageSchema>;

/** No calls, no tokens, no cost: a fresh object each time, so a caller may add to it. */
export function emptyUsage(): Usage {
  return {
    inputTokens: 0,
    outputTokens: 0,
    cacheReadTokens: 0,
    cacheWriteTokens: 0,
    reasoningTokens: 0,
    costNanoUsd: 0,
    calls: 0,
  };
}

export const RUN_EVENT_KINDS = [
  "accepted",
  "rejected",
  "resumed",
  "planned",
  "finished",
  "drained",
  "cancelled",
  "budget_skip",
  "budget_overspend",
  "reconcile_flag",
  "cell_failed",
  "poison",
  "security",
] as const;

/**
 * What a `security` event refused: a result or ledger call for an attempt the dispatcher never claimed, or a blob
 * reference outside the attempt's own prefix (in a result, a grade job or a judge job).
 */
export const SECURITY_CHECKS = ["unclaimed_attempt", "unclaimed_ledger_call", "foreign_blob_ref"] as const;
export type SecurityCheck = (typeof SECURITY_CHECKS)[number];

/** Something a user should see about a run. Published on events.<run>. */
export const RunEventSchema = z.object({
  type: z.literal(MessageTypes.runEvent),
  run: z.string(),
  kind: z.enum(RUN_EVENT_KINDS),
  at: IsoTime,
  message: z.string(),
  issues: z.array(IssueSchema).optional(),
  data: z.record(z.string(), z.unknown()).optional(),
});
export type RunEvent = z.output<typeof RunEventSchema>;

/** One cell of the matrix, as the planner hands it to the dispatcher. */
export const CellWorkSchema = z.object({
  type: z.literal(MessageTypes.cellWork),
  run: z.string(),
  cellId: z.string(),
  pool: z.string(),
  harness: z.string(),
  model: z.string(),
  reviewModel: z.string().nullable(),
  taskId: z.string(),
  track: z.enum(TRACKS),
  repeat: Int,
  traceId: z.string(),
  /** all-or-nothing budget exemption, decided at plan time from the seed's three rules */
  exempt: z.boolean(),
  costMode: z.enum(COST_MODES),
  /**
   * The lowest attempt number this cell may use (a resumed run: one past the highest the database knows), so a cell
   * whose NATS state was pruned never reuses an earlier attempt's number, ids or blobs. Absent: 0.
   */
  firstAttempt: Int.optional(),
  /** the run's `timeout_policy`: retry a timed-out attempt (the seed's rule; absent = retry) or grade its patch */
  timeoutPolicy: z.enum(TIMEOUT_POLICIES).optional(),
});
export type CellWork = z.output<typeof CellWorkSchema>;

export const ATTEMPT_STATUSES = [
  "PATCH_READY",
  "EMPTY_PATCH",
  "BUDGET_EXCEEDED",
  "MAX_TURNS_EXCEEDED",
  "TIMEOUT",
  "HARNESS_ERROR",
  /**
   * The environment, not the model, ended the attempt: infrastructure retries exhausted (a task that never started,
   * its container or image), the provider's spend limit, or 429s past the shim's retries with nothing to grade.
   * Counted apart and kept out of the resolved rate.
   */
  "INFRA_FAILURE",
] as const;
export type AttemptStatus = (typeof ATTEMPT_STATUSES)[number];

export const PhaseOutcomeSchema = z.object({
  name: z.string(),
  traceId: z.string(),
  model: z.string(),
  modelRole: z.enum(["implementation", "review"]),
  exitCode: z.number().int().nullable(),
  durationMs: Int,
  timedOut: z.boolean(),
  usage: UsageSchema,
  error: z.string().nullable().default(null),
  stdout: z.string().default(""),
  stderr: z.string().default(""),
});

export const SANDBOX_KINDS = ["container", "process", "simulated"] as const;
export type SandboxKind = (typeof SANDBOX_KINDS)[number];

/**
 * Patches up to this size travel inline in the attempt result and its grade job (a message stays well under
 * nats-server's 1 MB max_payload next to the result's 50 KB of stdout and of stderr); bigger ones go to the object store.
 */
export const INLINE_PATCH_MAX_BYTES = 128 * 1024;

/**
 * The patch as text to carry inline, or null when it must go to the object store: too big (as JSON, escapes counted),
 * not UTF-8, or holding a NUL.
 */
export function inlinePatchText(bytes: Uint8Array): string | null {
  if (bytes.length === 0 || bytes.length > INLINE_PATCH_MAX_BYTES) return null;
  const text = patchText(bytes);
  if (text === null) return null;
  return new TextEncoder().encode(JSON.stringify(text)).length <= INLINE_PATCH_MAX_BYTES ? text : null;
}

/** A patch's bytes as text, exactly (a BOM kept), or null when they are not UTF-8 or hold a NUL. */
export function patchText(bytes: Uint8Array): string | null {
  if (bytes.includes(0)) return null;
  try {
    return new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    return null;
  }
}

/** What a harness task publishes when it exits, for any reason. Usage totals are the shim's running totals. */
export const AttemptResultSchema = z.object({
  type: z.literal(MessageTypes.attemptResult),
  run: z.string(),
  cellId: z.string(),
  attempt: Int,
  status: z.enum(ATTEMPT_STATUSES),
  exitCode: z.number().int().nullable(),
  usage: UsageSchema,
  numToolCalls: Int.default(0),
  patchHash: z.string().nullable(),
  patchRef: z.string().nullable(),
  /**
   * The patch itself when it is small UTF-8 text (`inlinePatchText`): then `patchRef` is null and no blob holds it.
   * A patch carried this way costs the plane no object-store writes; a bigger one goes to the object store.
   */
  patch: z.string().nullable().default(null),
  trajectoryRef: z.string().nullable(),
  /** redacted and cut to the last 50 KB */
  stdout: z.string(),
  stderr: z.string(),
  errorMessage: z.string().nullable(),
  harnessReportedCostNanoUsd: Int.nullable().default(null),
  startedAt: IsoTime,
  finishedAt: IsoTime,
  latencyMs: Int,
  timeToFirstAttemptMs: Int.nullable().default(null),
  phases: z.array(PhaseOutcomeSchema).default([]),
  /**
   * How the harness was isolated: `container` (its own container: no network but its shim, no credentials, its
   * workdir the only host path), `process` (a plain process on the task's machine: unsandboxed), `simulated`
   * (the sim backend ran no harness); null when not said (a stand-in result for a task that never reported).
   */
  sandbox: z.enum(SANDBOX_KINDS).nullable().optional(),
});
export type AttemptResult = z.output<typeof AttemptResultSchema>;

export const LEDGER_STATUSES = ["ok", "error", "cut", "refused", "rate_limited", "overloaded"] as const;

/** One provider call attempt, metered by the shim. `callId` is also the JetStream message id. */
export const LedgerCallSchema = z.object({
  type: z.literal(MessageTypes.ledgerCall),
  callId: z.string().min(1),
  run: z.string(),
  cellId: z.string(),
  attempt: Int,
  traceId: z.string(),
  model: z.string(),
  alias: z.string(),
  pool: z.string(),
  provider: z.enum(["anthropic", "openai"]),
  endpoint: z.string(),
  status: z.enum(LEDGER_STATUSES),
  httpStatus: z.number().int().nullable(),
  inputTokens: Int,
  outputTokens: Int,
  cacheReadTokens: Int,
  cacheWriteTokens: Int,
  reasoningTokens: Int,
  costNanoUsd: Int,
  priceVersion: z.string(),
  latencyMs: Int,
  ttfbMs: Int.nullable(),
  pacerWaitMs: Int,
  retries: Int,
  clampedMaxTokens: Int.nullable(),
  /** true when usage was not reported (a cut stream) and the figures are what was seen */
  estimated: z.boolean(),
  costMode: z.enum(COST_MODES),
  startedAt: IsoTime,
});
export type LedgerCall = z.output<typeof LedgerCallSchema>;

/** An attempt to grade: published by the results-writer when an attempt lands PATCH_READY. */
export const GradeJobSchema = z.object({
  type: z.literal(MessageTypes.gradeJob),
  run: z.string(),
  cellId: z.string(),
  attempt: Int,
  taskId: z.string(),
  /** the patch's blob, or "" when the patch travels inline in `patch` */
  patchRef: z.string(),
  patchHash: z.string(),
  patch: z.string().nullable().default(null),
});
export type GradeJob = z.output<typeof GradeJobSchema>;

export const GRADE_STATUSES = ["FULL", "PARTIAL", "NO", "INFRA_FAILURE"] as const;

export const GradeResultSchema = z.object({
  type: z.literal(MessageTypes.gradeResult),
  run: z.string(),
  cellId: z.string(),
  attempt: Int,
  status: z.enum(GRADE_STATUSES),
  resolved: z.boolean(),
  /** report.json in the official shape */
  report: z.record(z.string(), z.unknown()),
  imageDigest: z.string().nullable(),
  /** where it was graded: `docker` (a container from the image pinned by imageDigest) or `local` (a checkout) */
  grader: z.enum(["docker", "local"]).optional(),
  graderVersion: z.string(),
  cached: z.boolean(),
  error: z.string().nullable(),
  gradedAt: IsoTime,
});
export type GradeResult = z.output<typeof GradeResultSchema>;

export const JudgeJobSchema = z.object({
  type: z.literal(MessageTypes.judgeJob),
  run: z.string(),
  cellId: z.string(),
  attempt: Int,
  taskId: z.string(),
  trajectoryRef: z.string().nullable(),
  patchRef: z.string().nullable(),
  /** the patch inline (see AttemptResult.patch) */
  patch: z.string().nullable().default(null),
});
export type JudgeJob = z.output<typeof JudgeJobSchema>;

export const VerdictSchema = z.object({
  type: z.literal(MessageTypes.verdict),
  run: z.string(),
  cellId: z.string(),
  attempt: Int,
  score: z.number().min(0).max(1),
  rationale: z.string(),
  judgeModel: z.string(),
  costNanoUsd: Int,
  judgedAt: IsoTime,
});
export type Verdict = z.output<typeof VerdictSchema>;

export const ControlSchema = z.object({
  type: z.literal(MessageTypes.control),
  run: z.string(),
  verb: z.enum(["drain", "cancel", "resume"]),
  requestedBy: z.string().default("cli"),
  at: IsoTime,
});
export type Control = z.output<typeof ControlSchema>;

export const RUN_PHASES = ["rejected", "planned", "running", "draining", "cancelled", "finished"] as const;

/** The `run.<run>` progress key: the seed's counters plus money. */
export const RunProgressSchema = z.object({
  type: z.literal(MessageTypes.runProgress),
  run: z.string(),
  phase: z.enum(RUN_PHASES),
  message: z.string(),
  issues: z.array(IssueSchema).optional(),
  totalCells: Int,
  completed: Int,
  failed: Int,
  skipped: Int,
  running: Int,
  pending: Int,
  totalCostNanoUsd: Int,
  billableCostNanoUsd: Int,
  budgetNanoUsd: Int.nullable(),
  /** things the plane refused for this run because they were forged (security events); absent = none counted yet */
  securityEvents: Int.optional(),
  /**
   * cells whose attempt the environment ended (image pull, container start, disk, exhausted 429s, provider spend
   * limits, a task that never started, grading's environment): counted apart, out of the resolved rate
   */
  infraFailures: Int.optional(),
  /** error messages of failed and skipped cells (`cell: error`), oldest first; the CLI shows the first 5 */
  errors: z.array(z.string()).optional(),
  /**
   * The seed's counters (its OrchestratorProgress): completed = cells that passed (exit_class pass), failed = fail or
   * a kill, skipped = skipped by the budget cap or already completed by an earlier submission. The top-level
   * completed / failed / skipped count cells by run_state status.
   */
  seed: z.object({ completed: Int, failed: Int, skipped: Int }).optional(),
  /** cells already completed by an earlier submission of this run (the seed counts them as skipped) */
  alreadyCompleted: Int.optional(),
  /** of those, the ones that passed (exit_class pass) */
  alreadyPassed: Int.optional(),
  /**
   * The RUNS stream sequence of the submission the planner planned last, and whether that plan resumed the run: a
   * redelivered submission (the planner died before acking it) is planned again as what it was, not as a resume.
   */
  submissionSeq: Int.optional(),
  resumed: z.boolean().optional(),
  updatedAt: IsoTime,
  pools: z
    .record(z.string(), z.object({ fleetSize: Int, inputs: z.record(z.string(), z.number()).optional() }))
    .optional(),
});
export type RunProgress = z.output<typeof RunProgressSchema>;

/**
 * A run's progress with nothing counted yet (no cells, no cost, no budget), stamped now; `fields` says which run,
 * its phase and message, and sets whatever else is already known.
 */
export function emptyRunProgress(
  fields: Pick<RunProgress, "run" | "phase" | "message"> & Partial<RunProgress>,
): RunProgress {
  return {
    type: MessageTypes.runProgress,
    totalCells: 0,
    completed: 0,
    failed: 0,
    skipped: 0,
    running: 0,
    pending: 0,
    totalCostNanoUsd: 0,
    billableCostNanoUsd: 0,
    budgetNanoUsd: null,
    updatedAt: new Date().toISOString(),
    ...fields,
  };
}

/**
 * On `attempts.signal.<run>.<cell>.<attempt>` (core NATS): end the attempt's session — the shim's cap
 * (`budget_exceeded`, `max_turns_exceeded`) or the dispatcher's cancel. The shim adds the figures the cap came from.
 */
export const AttemptSignalSchema = z.looseObject({
  reason: z.string().min(1),
  /** the subject names the attempt; a body may repeat it */
  run: z.string().optional(),
  cellId: z.string().optional(),
  attempt: Int.optional(),
});
export type AttemptSignal = z.output<typeof AttemptSignalSchema>;

/** The `cell.<run>.<cell>` progress key, written by the dispatcher and the shim. */
export const CellProgressSchema = z.object({
  type: z.literal(MessageTypes.cellProgress),
  run: z.string(),
  cellId: z.string(),
  attempt: Int,
  status: z.enum(["pending", "running", "completed", "failed", "skipped"]),
  usage: UsageSchema,
  turns: Int,
  pacerWaitMs: Int,
  updatedAt: IsoTime,
  detail: z.string().optional(),
});
export type CellProgress = z.output<typeof CellProgressSchema>;

export const HeartbeatSchema = z.object({
  type: z.literal(MessageTypes.heartbeat),
  actor: z.string(),
  id: z.string(),
  state: z.enum(["starting", "running", "draining", "stopped", "failed"]),
  pid: Int,
  host: z.string(),
  startedAt: IsoTime,
  at: IsoTime,
  handled: Int,
  failed: Int,
  /** why the actor takes no work just now (JetStream storage full), when it is held up */
  blocked: z.string().optional(),
});
export type Heartbeat = z.output<typeof HeartbeatSchema>;
