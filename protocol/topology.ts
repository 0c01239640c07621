import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamManager,
  RetentionPolicy,
  StorageType,
  type StreamConfig,
  type StreamInfo,
} from "@nats-io/jetstream";
import { type KV, Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";
import type { NatsConnection } from "@nats-io/transport-node";
import { ErrorCode, EvalfleetError } from "./errors.js";
import { Subjects } from "./subjects.js";

const NS = 1_000_000;
const SECOND_NS = 1_000 * NS;
const DAY_NS = 86_400 * SECOND_NS;

/** A stream evalfleet relies on, with the settings that matter for correctness. */
export interface StreamDef {
  name: string;
  subjects: string[];
  retention: RetentionPolicy;
  maxAgeNs: number;
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
    maxAgeNs: 7 * DAY_NS,
    duplicateWindowNs: 120 * SECOND_NS,
    maxMsgSize: 1024 * 1024,
  },
  events: {
    name: "EF_EVENTS",
    subjects: [Subjects.events.all],
    retention: RetentionPolicy.Limits,
    maxAgeNs: 30 * DAY_NS,
    duplicateWindowNs: 120 * SECOND_NS,
    maxMsgSize: 256 * 1024,
  },
  cells: {
    name: "EF_CELLS",
    subjects: [Subjects.cells.all],
    retention: RetentionPolicy.Workqueue,
    maxAgeNs: 30 * DAY_NS,
    duplicateWindowNs: 10 * 60 * SECOND_NS,
    maxMsgSize: 256 * 1024,
  },
  attempts: {
    name: "EF_ATTEMPTS",
    subjects: [Subjects.attempts.all],
    retention: RetentionPolicy.Limits,
    maxAgeNs: 30 * DAY_NS,
    duplicateWindowNs: 10 * 60 * SECOND_NS,
    maxMsgSize: 1024 * 1024,
  },
  ledger: {
    name: "EF_LEDGER",
    subjects: [Subjects.ledger.all],
    retention: RetentionPolicy.Limits,
    maxAgeNs: 30 * DAY_NS,
    duplicateWindowNs: 10 * 60 * SECOND_NS,
    maxMsgSize: 64 * 1024,
  },
  gradeJobs: {
    name: "EF_GRADE_JOBS",
    subjects: [Subjects.gradeJobs.all],
    retention: RetentionPolicy.Workqueue,
    maxAgeNs: 30 * DAY_NS,
    duplicateWindowNs: 10 * 60 * SECOND_NS,
    maxMsgSize: 256 * 1024,
  },
  gradeResults: {
    name: "EF_GRADE_RESULTS",
    subjects: [Subjects.gradeResults.all],
    retention: RetentionPolicy.Limits,
    maxAgeNs: 30 * DAY_NS,
    duplicateWindowNs: 10 * 60 * SECOND_NS,
    maxMsgSize: 1024 * 1024,
  },
  judgeJobs: {
    name: "EF_JUDGE_JOBS",
    subjects: [Subjects.judgeJobs.all],
    retention: RetentionPolicy.Workqueue,
    maxAgeNs: 30 * DAY_NS,
    duplicateWindowNs: 10 * 60 * SECOND_NS,
    maxMsgSize: 256 * 1024,
  },
  judgeResults: {
    name: "EF_JUDGE_RESULTS",
    subjects: [Subjects.judgeResults.all],
    retention: RetentionPolicy.Limits,
    maxAgeNs: 30 * DAY_NS,
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
    maxDeliver: 5,
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

/** A KV bucket. `maxAgeMs` is bucket-level: nats-server 2.9 ignores per-key TTL, so expiry is per bucket. */
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
    maxAgeMs: 30 * 86_400_000,
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
 * Create every stream, consumer, bucket and object store, idempotently, and check what the server kept: nats-server
 * accepts config fields it does not know and drops them, and an existing bucket keeps its old settings. A mismatch
 * in a setting evalfleet depends on is an error that names the setting, never a silent downgrade.
 */
export async function ensureTopology(nc: NatsConnection, jsm: JetStreamManager): Promise<void> {
  for (const def of Object.values(Streams)) {
    const info = await ensureStream(jsm, def);
    checkStream(def, info);
  }
  for (const def of Object.values(Consumers)) {
    await ensureConsumer(jsm, def);
  }
  for (const def of Object.values(Buckets)) await openBucket(nc, def);
  const objm = new Objm(nc);
  for (const def of Object.values(ObjectStores)) {
    await afterConcurrentCreate(() => objm.create(def.name, { description: def.description }));
  }
}

/**
 * Open a KV bucket, creating it if missing, and check the settings evalfleet depends on. Safe to call from many
 * processes at once on a fresh server: a create that loses the race to another creator reads the winner's bucket.
 */
export async function openBucket(nc: NatsConnection, def: BucketDef): Promise<KV> {
  const kv = await afterConcurrentCreate(() =>
    new Kvm(nc).create(def.name, { history: def.history, ttl: def.maxAgeMs, description: def.description }),
  );
  const status = await kv.status();
  if (status.history !== def.history || status.ttl !== def.maxAgeMs) {
    throw new EvalfleetError(
      ErrorCode.TopologyMismatch,
      `KV bucket '${def.name}' exists with history=${status.history}, ttl=${status.ttl}ms; evalfleet needs history=${def.history}, ttl=${def.maxAgeMs}ms. Delete the bucket (nats kv del ${def.name}) or point evalfleet at a fresh server.`,
    );
  }
  return kv;
}

async function ensureStream(jsm: JetStreamManager, def: StreamDef): Promise<StreamInfo> {
  const want: Partial<StreamConfig> & { name: string } = {
    name: def.name,
    subjects: def.subjects,
    retention: def.retention,
    storage: StorageType.File,
    max_age: def.maxAgeNs,
    duplicate_window: def.duplicateWindowNs,
    max_msg_size: def.maxMsgSize,
    discard: DiscardPolicy.Old,
    num_replicas: streamReplicas(),
  };
  try {
    return await afterConcurrentCreate(() => jsm.streams.add(want));
  } catch (err) {
    // Exists with other settings: update the ones that may change in place.
    if (!isStreamExists(err)) throw err;
    try {
      return await jsm.streams.update(def.name, want);
    } catch (updateErr) {
      throw new EvalfleetError(
        ErrorCode.TopologyMismatch,
        `stream ${def.name} exists with settings evalfleet cannot change in place (${updateErr instanceof Error ? updateErr.message : String(updateErr)}; evalfleet needs retention=${def.retention}). Delete the stream or use a fresh server.`,
        { cause: updateErr },
      );
    }
  }
}

/**
 * Run a create that another process may be running at the same moment. nats-server can answer the loser of that
 * race with "subjects overlap" (10065) although the winner made the very same stream; a second try finds it made.
 */
async function afterConcurrentCreate<T>(create: () => Promise<T>): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await create();
    } catch (err) {
      if (!(err instanceof JetStreamApiError && err.code === 10065) || attempt >= 3) throw err;
      await new Promise((r) => setTimeout(r, 50 * attempt));
    }
  }
}

/** err_code 10058: a stream with that name exists with a different configuration. */
function isStreamExists(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === 10058;
}

/** Replicas per stream: 1 locally, 3 on a cluster (EVALFLEET_STREAM_REPLICAS). */
export function streamReplicas(): number {
  const n = Number(process.env.EVALFLEET_STREAM_REPLICAS ?? "1");
  return Number.isInteger(n) && n >= 1 && n <= 5 ? n : 1;
}

function checkStream(def: StreamDef, info: StreamInfo): void {
  const c = info.config;
  const problems: string[] = [];
  if (c.retention !== def.retention) problems.push(`retention=${c.retention} (want ${def.retention})`);
  if (c.duplicate_window !== def.duplicateWindowNs)
    problems.push(`duplicate_window=${c.duplicate_window} (want ${def.duplicateWindowNs})`);
  if (c.max_age !== def.maxAgeNs) problems.push(`max_age=${c.max_age} (want ${def.maxAgeNs})`);
  if (c.max_msg_size !== def.maxMsgSize)
    problems.push(`max_msg_size=${c.max_msg_size} (want ${def.maxMsgSize})`);
  const missing = def.subjects.filter((s) => !c.subjects.includes(s));
  if (missing.length > 0) problems.push(`subjects missing ${missing.join(", ")}`);
  if (problems.length > 0) {
    throw new EvalfleetError(
      ErrorCode.TopologyMismatch,
      `stream ${def.name} was not created as asked: ${problems.join("; ")}. The server may be too old or the stream was made by hand; delete it or use a fresh server.`,
    );
  }
}

async function ensureConsumer(jsm: JetStreamManager, def: ConsumerDef): Promise<void> {
  const cfg = {
    durable_name: def.durable,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    filter_subject: def.filterSubject,
    ack_wait: def.ackWaitNs,
    max_deliver: def.maxDeliver,
    max_ack_pending: def.maxAckPending,
  };
  let info: Awaited<ReturnType<typeof jsm.consumers.info>>;
  try {
    info = await jsm.consumers.info(def.stream, def.durable);
    if (info.config.ack_wait !== def.ackWaitNs || info.config.max_ack_pending !== def.maxAckPending) {
      info = await jsm.consumers.update(def.stream, def.durable, {
        ack_wait: def.ackWaitNs,
        max_ack_pending: def.maxAckPending,
        max_deliver: def.maxDeliver,
      });
    }
  } catch (err) {
    if (!(err instanceof JetStreamApiError && err.code === JetStreamApiCodes.ConsumerNotFound)) throw err;
    info = await jsm.consumers.add(def.stream, cfg);
  }
  if (info.config.filter_subject !== def.filterSubject || info.config.ack_policy !== AckPolicy.Explicit) {
    throw new EvalfleetError(
      ErrorCode.TopologyMismatch,
      `consumer ${def.stream}/${def.durable} has filter ${info.config.filter_subject ?? "(none)"}; evalfleet needs ${def.filterSubject} with explicit acks. Delete the consumer and restart.`,
    );
  }
}
