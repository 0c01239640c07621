import { z } from "zod";
import { COST_MODES, TRACKS } from "./config.js";

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
  jobSpec: "evalfleet.job.spec.v1",
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
] as const;

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
});
export type CellWork = z.output<typeof CellWorkSchema>;

export const ATTEMPT_STATUSES = [
  "PATCH_READY",
  "EMPTY_PATCH",
  "BUDGET_EXCEEDED",
  "MAX_TURNS_EXCEEDED",
  "TIMEOUT",
  "HARNESS_ERROR",
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
  patchRef: z.string(),
  patchHash: z.string(),
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

/** What a task fetches by reference from the `jobs` bucket: everything it needs to run one cell. */
export const JobSpecSchema = z.object({
  type: z.literal(MessageTypes.jobSpec),
  work: CellWorkSchema,
  task: z.record(z.string(), z.unknown()),
  harness: z.record(z.string(), z.unknown()),
  model: z.record(z.string(), z.unknown()),
  reviewModel: z.record(z.string(), z.unknown()).nullable(),
  caps: z.object({
    maxTurns: z.number().int().nullable(),
    budgetNanoUsd: Int.nullable(),
    timeoutSeconds: z.number().int(),
  }),
  taskLibraryPath: z.string(),
});
export type JobSpec = z.output<typeof JobSpecSchema>;

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
  updatedAt: IsoTime,
  pools: z
    .record(z.string(), z.object({ fleetSize: Int, inputs: z.record(z.string(), z.number()).optional() }))
    .optional(),
});
export type RunProgress = z.output<typeof RunProgressSchema>;

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
});
export type Heartbeat = z.output<typeof HeartbeatSchema>;
