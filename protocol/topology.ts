import { RetentionPolicy } from "@nats-io/jetstream";
import { BlobNames, ProgressKeys, StateKeys, Subjects } from "./subjects.js";

const NS = 1_000_000;
const SECOND_NS = 1_000 * NS;

/**
 * A stream evalfleet relies on, with the settings that matter for correctness. No stream has an age limit and none
 * discards old messages: unacked work and unconsumed results stay until they are handled, a finished run's messages
 * leave when the run is pruned (actors/results-writer/prune.ts), and a stream (or the server's store) that is full
 * refuses new messages instead of dropping old ones (`discard: new`; the size cap is a setting).
 */
export interface StreamDef {
  name: string;
  subjects: string[];
  retention: RetentionPolicy;
  /** Window in which a repeated Nats-Msg-Id is dropped. */
  duplicateWindowNs: number;
  maxMsgSize: number;
}

/** Every stream. */
export const Streams = {
  runs: {
    name: "EF_RUNS",
    subjects: [Subjects.runSubmit],
    retention: RetentionPolicy.Workqueue,
    duplicateWindowNs: 120 * SECOND_NS,
    maxMsgSize: 1024 * 1024,
  },
  events: {
    name: "EF_EVENTS",
    subjects: [Subjects.events.all],
    retention: RetentionPolicy.Limits,
    duplicateWindowNs: 120 * SECOND_NS,
    maxMsgSize: 256 * 1024,
  },
  cells: {
    name: "EF_CELLS",
    subjects: [Subjects.cells.all],
    retention: RetentionPolicy.Workqueue,
    duplicateWindowNs: 10 * 60 * SECOND_NS,
    maxMsgSize: 256 * 1024,
  },
  attempts: {
    name: "EF_ATTEMPTS",
    subjects: [Subjects.attempts.all],
    retention: RetentionPolicy.Limits,
    duplicateWindowNs: 10 * 60 * SECOND_NS,
    maxMsgSize: 1024 * 1024,
  },
  ledger: {
    name: "EF_LEDGER",
    subjects: [Subjects.ledger.all],
    retention: RetentionPolicy.Limits,
    duplicateWindowNs: 10 * 60 * SECOND_NS,
    maxMsgSize: 64 * 1024,
  },
  gradeJobs: {
    name: "EF_GRADE_JOBS",
    subjects: [Subjects.gradeJobs.all],
    retention: RetentionPolicy.Workqueue,
    duplicateWindowNs: 10 * 60 * SECOND_NS,
    maxMsgSize: 256 * 1024,
  },
  gradeResults: {
    name: "EF_GRADE_RESULTS",
    subjects: [Subjects.gradeResults.all],
    retention: RetentionPolicy.Limits,
    duplicateWindowNs: 10 * 60 * SECOND_NS,
    maxMsgSize: 1024 * 1024,
  },
  judgeJobs: {
    name: "EF_JUDGE_JOBS",
    subjects: [Subjects.judgeJobs.all],
    retention: RetentionPolicy.Workqueue,
    duplicateWindowNs: 10 * 60 * SECOND_NS,
    maxMsgSize: 256 * 1024,
  },
  judgeResults: {
    name: "EF_JUDGE_RESULTS",
    subjects: [Subjects.judgeResults.all],
    retention: RetentionPolicy.Limits,
    duplicateWindowNs: 10 * 60 * SECOND_NS,
    maxMsgSize: 256 * 1024,
  },
} as const satisfies Record<string, StreamDef>;

/** A durable pull consumer shared by every replica of one actor. */
export interface ConsumerDef {
  stream: string;
  durable: string;
  filterSubject: string;
  ackWaitNs: number;
  maxDeliver: number;
  maxAckPending: number;
}

export const Consumers = {
  planner: {
    stream: Streams.runs.name,
    durable: "planner",
    filterSubject: Subjects.runSubmit,
    ackWaitNs: 60 * SECOND_NS,
    // Unbounded: a submission that keeps failing for a reason of its own is terminated by the actor (poison after
    // 5 tries); one held up by a full store or a database outage must wait, not be dropped after 5 deliveries.
    maxDeliver: -1,
    maxAckPending: 64,
  },
  dispatcher: {
    stream: Streams.cells.name,
    durable: "dispatcher",
    filterSubject: Subjects.cells.all,
    // Held cells are kept alive with working() every capacity poll, so a short wait only matters when a replica
    // dies: its held cells come back to the others in 20 s instead of stalling the run for minutes.
    ackWaitNs: 20 * SECOND_NS,
    maxDeliver: -1,
    maxAckPending: 50_000,
  },
  /** The dispatcher's own view of attempt results: reconcile budgets and decide retries. */
  dispatcherAttempts: {
    stream: Streams.attempts.name,
    durable: "dispatcher-attempts",
    filterSubject: Subjects.attempts.all,
    ackWaitNs: 60 * SECOND_NS,
    maxDeliver: -1,
    maxAckPending: 20_000,
  },
  resultsWriterAttempts: {
    stream: Streams.attempts.name,
    durable: "results-writer-attempts",
    filterSubject: Subjects.attempts.all,
    ackWaitNs: 60 * SECOND_NS,
    maxDeliver: -1,
    maxAckPending: 20_000,
  },
  resultsWriterLedger: {
    stream: Streams.ledger.name,
    durable: "results-writer-ledger",
    filterSubject: Subjects.ledger.all,
    ackWaitNs: 60 * SECOND_NS,
    maxDeliver: -1,
    maxAckPending: 20_000,
  },
  resultsWriterGrades: {
    stream: Streams.gradeResults.name,
    durable: "results-writer-grades",
    filterSubject: Subjects.gradeResults.all,
    ackWaitNs: 60 * SECOND_NS,
    maxDeliver: -1,
    maxAckPending: 5_000,
  },
  resultsWriterVerdicts: {
    stream: Streams.judgeResults.name,
    durable: "results-writer-verdicts",
    filterSubject: Subjects.judgeResults.all,
    ackWaitNs: 60 * SECOND_NS,
    maxDeliver: -1,
    maxAckPending: 5_000,
  },
  graderSupervisor: {
    stream: Streams.gradeJobs.name,
    durable: "grader-supervisor",
    filterSubject: Subjects.gradeJobs.all,
    // A grade says working() every 30 s; a dead grader's jobs return after 90 s.
    ackWaitNs: 90 * SECOND_NS,
    maxDeliver: -1,
    maxAckPending: 256,
  },
  judge: {
    stream: Streams.judgeJobs.name,
    durable: "judge",
    filterSubject: Subjects.judgeJobs.all,
    ackWaitNs: 300 * SECOND_NS,
    maxDeliver: -1,
    maxAckPending: 64,
  },
} as const satisfies Record<string, ConsumerDef>;

/**
 * A KV bucket. `maxAgeMs` is bucket-level (nats-server 2.9 ignores per-key TTL): only `progress`, whose values are
 * live figures rewritten while they matter, expires; every other bucket keeps its keys until their run is pruned.
 */
export interface BucketDef {
  name: string;
  history: number;
  maxAgeMs: number;
  description: string;
}

export const Buckets = {
  progress: {
    name: "progress",
    history: 1,
    maxAgeMs: 7 * 86_400_000,
    description: "live progress: run.<run>, cell.<run>.<cell>, pool.<run>.<pool>, actor.<name>.<id>",
  },
  pacer: {
    name: "pacer",
    history: 1,
    maxAgeMs: 0,
    description: "pacer token buckets and discovered limits per pool",
  },
  budgets: { name: "budgets", history: 1, maxAgeMs: 0, description: "run budgets and reservations (CAS)" },
  jobs: {
    name: "jobs",
    history: 1,
    maxAgeMs: 0,
    description: "job specs handed to tasks by reference",
  },
  control: {
    name: "control",
    history: 1,
    maxAgeMs: 0,
    description: "run control state: active, draining, cancelled",
  },
} as const satisfies Record<string, BucketDef>;

/** The object store for patches, trajectories, harness logs and test output. */
export const ObjectStores = { blobs: { name: "blobs", description: "attempt blobs" } } as const;

/**
 * Everything one run leaves in NATS, by where it is: what pruning a finished run removes (its durable rows stay in
 * PostgreSQL). Stream subjects as filters for a purge; KV keys (exact, or wildcards) per bucket; the blobs' prefix.
 */
export function runFootprint(run: string): {
  streams: Array<{ stream: string; filter: string }>;
  keys: Array<{ bucket: string; filter: string }>;
  blobPrefix: string;
} {
  return {
    streams: [
      { stream: Streams.cells.name, filter: Subjects.cells.run(run) },
      { stream: Streams.attempts.name, filter: Subjects.attempts.run(run) },
      { stream: Streams.ledger.name, filter: Subjects.ledger.run(run) },
      { stream: Streams.events.name, filter: Subjects.events.run(run) },
      { stream: Streams.gradeJobs.name, filter: Subjects.gradeJobs.one(run) },
      { stream: Streams.gradeResults.name, filter: Subjects.gradeResults.one(run) },
      { stream: Streams.judgeJobs.name, filter: Subjects.judgeJobs.one(run) },
      { stream: Streams.judgeResults.name, filter: Subjects.judgeResults.one(run) },
    ],
    keys: [
      { bucket: Buckets.budgets.name, filter: StateKeys.budget(run) },
      { bucket: Buckets.budgets.name, filter: StateKeys.claimsOfRun(run) },
      { bucket: Buckets.budgets.name, filter: StateKeys.cellsOfRun(run) },
      { bucket: Buckets.jobs.name, filter: StateKeys.jobRun(run) },
      { bucket: Buckets.jobs.name, filter: StateKeys.tasksOfRun(run) },
      { bucket: Buckets.jobs.name, filter: StateKeys.cellsOfRun(run) },
      { bucket: Buckets.jobs.name, filter: StateKeys.attemptKeysOfRun(run) },
      { bucket: Buckets.control.name, filter: StateKeys.control(run) },
      { bucket: Buckets.progress.name, filter: ProgressKeys.run(run) },
      { bucket: Buckets.progress.name, filter: ProgressKeys.cellsOfRun(run) },
      { bucket: Buckets.progress.name, filter: ProgressKeys.poolsOfRun(run) },
    ],
    blobPrefix: BlobNames.runPrefix(run),
  };
}
