/**
 * Making the topology protocol/topology.ts defines: every stream, consumer, KV bucket and object store, created when
 * missing and checked against what the server kept. Safe from many processes at once on a fresh server.
 */
import {
  AckPolicy,
  DeliverPolicy,
  DiscardPolicy,
  JetStreamApiCodes,
  JetStreamApiError,
  type JetStreamManager,
  jetstreamManager,
  StorageType,
  type StreamConfig,
  type StreamInfo,
} from "@nats-io/jetstream";
import { type KV, Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";
import type { NatsConnection } from "@nats-io/transport-node";
import { retry } from "../lib/retry.js";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import {
  type BucketDef,
  Buckets,
  type ConsumerDef,
  Consumers,
  ObjectStores,
  type StreamDef,
  Streams,
} from "../protocol/topology.js";
/** How big the topology is allowed to get: the role's `topology` settings. */
export interface TopologyOptions {
  /** replicas per stream: 1 locally, 3 on a cluster (EVALFLEET_STREAM_REPLICAS) */
  streamReplicas?: number;
  /** each stream's size cap in bytes, -1 for none (EVALFLEET_STREAM_MAX_BYTES); a full stream refuses new messages */
  streamMaxBytes?: number;
}

/**
 * Create every stream, consumer, bucket and object store, idempotently, and check what the server kept: nats-server
 * accepts config fields it does not know and drops them, and an existing bucket keeps its old settings. A mismatch
 * in a setting evalfleet depends on is an error that names the setting, never a silent downgrade.
 */
export async function ensureTopology(
  nc: NatsConnection,
  jsm: JetStreamManager,
  opts: TopologyOptions = {},
): Promise<void> {
  for (const def of Object.values(Streams)) {
    const info = await ensureStream(jsm, def, opts);
    checkStream(def, info, opts);
  }
  for (const def of Object.values(Consumers)) {
    await ensureConsumer(jsm, def);
  }
  for (const def of Object.values(Buckets)) await openBucket(nc, def);
  const objm = new Objm(nc);
  for (const def of Object.values(ObjectStores)) {
    await afterConcurrentCreate(() =>
      objm.create(def.name, {
        description: def.description,
        replicas: opts.streamReplicas ?? 1,
        ...(opts.streamMaxBytes && opts.streamMaxBytes > 0 ? { max_bytes: opts.streamMaxBytes } : {}),
      }),
    );
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
  if (status.history === def.history && status.ttl === def.maxAgeMs) return kv;
  // An older evalfleet made it with other limits (jobs used to expire after 30 days, dropping a long run's config):
  // both are limits of the bucket's stream, which can change in place.
  const stream = `KV_${def.name}`;
  try {
    const jsm = await jetstreamManager(nc);
    await jsm.streams.update(stream, {
      max_msgs_per_subject: def.history,
      max_age: def.maxAgeMs * 1_000_000,
    });
  } catch (err) {
    throw new EvalfleetError(
      ErrorCode.TopologyMismatch,
      `KV bucket '${def.name}' exists with history=${status.history}, ttl=${status.ttl}ms and could not be changed to history=${def.history}, ttl=${def.maxAgeMs}ms (${err instanceof Error ? err.message : String(err)}). Delete the bucket (nats kv del ${def.name}) or point evalfleet at a fresh server.`,
      { cause: err },
    );
  }
  return await new Kvm(nc).open(def.name);
}

async function ensureStream(
  jsm: JetStreamManager,
  def: StreamDef,
  opts: TopologyOptions,
): Promise<StreamInfo> {
  const want: Partial<StreamConfig> & { name: string } = {
    name: def.name,
    subjects: def.subjects,
    retention: def.retention,
    storage: StorageType.File,
    // Nothing leaves by age or to make room: a finished run is pruned, a full stream refuses new messages.
    max_age: 0,
    max_msgs: -1,
    max_bytes: opts.streamMaxBytes ?? -1,
    discard: DiscardPolicy.New,
    duplicate_window: def.duplicateWindowNs,
    max_msg_size: def.maxMsgSize,
    num_replicas: opts.streamReplicas ?? 1,
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
function afterConcurrentCreate<T>(create: () => Promise<T>): Promise<T> {
  return retry(create, {
    tries: 3,
    baseMs: 50,
    maxMs: 200,
    retryError: (err) => err instanceof JetStreamApiError && err.code === SUBJECTS_OVERLAP,
  });
}

/** err_code 10065: the subjects of a stream being created overlap an existing stream's. */
const SUBJECTS_OVERLAP = 10065;

/** err_code 10058: a stream with that name exists with a different configuration. */
function isStreamExists(err: unknown): boolean {
  return err instanceof JetStreamApiError && err.code === 10058;
}

function checkStream(def: StreamDef, info: StreamInfo, opts: TopologyOptions): void {
  const c = info.config;
  const problems: string[] = [];
  if (c.retention !== def.retention) problems.push(`retention=${c.retention} (want ${def.retention})`);
  if (c.duplicate_window !== def.duplicateWindowNs)
    problems.push(`duplicate_window=${c.duplicate_window} (want ${def.duplicateWindowNs})`);
  if (c.max_age !== 0) problems.push(`max_age=${c.max_age} (want 0: nothing expires)`);
  if (c.discard !== DiscardPolicy.New)
    problems.push(`discard=${c.discard} (want new: a full stream refuses)`);
  const maxBytes = opts.streamMaxBytes ?? -1;
  if (c.max_bytes !== maxBytes) problems.push(`max_bytes=${c.max_bytes} (want ${maxBytes})`);
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
    if (
      info.config.ack_wait !== def.ackWaitNs ||
      info.config.max_ack_pending !== def.maxAckPending ||
      info.config.max_deliver !== def.maxDeliver
    ) {
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
