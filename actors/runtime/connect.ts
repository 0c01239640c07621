import { type JetStreamClient, type JetStreamManager, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { type KV, Kvm } from "@nats-io/kv";
import { type ObjectStore, Objm } from "@nats-io/obj";
import { type ConnectionOptions, connect, type NatsConnection } from "@nats-io/transport-node";
import { ErrorCode, RetryableError } from "../../protocol/errors.js";
import { Buckets, ensureTopology, ObjectStores } from "../../protocol/topology.js";

/** Everything an actor needs from NATS, opened once. */
export interface Plane {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  kv: { progress: KV; pacer: KV; budgets: KV; jobs: KV; control: KV };
  blobs: ObjectStore;
  close(): Promise<void>;
}

/** NATS_URL, or the local default. */
export function natsUrl(): string {
  return process.env.NATS_URL ?? "nats://127.0.0.1:4222";
}

/**
 * Connect, make sure the topology exists (idempotent; `ensure: false` for a process started after the actors made
 * it, like a harness task: 20,000 of them re-checking every stream would be 20,000 rounds of JetStream API calls) and
 * open the buckets. A server that does not answer is a
 * RetryableError that says where evalfleet looked.
 */
export async function openPlane(opts: {
  servers?: string | string[];
  name: string;
  ensure?: boolean;
  /** credentials, for a server with accounts (the deploy's per-role users) */
  auth?: Pick<ConnectionOptions, "user" | "pass" | "authenticator">;
}): Promise<Plane> {
  const servers = opts.servers ?? natsUrl().split(",");
  let nc: NatsConnection;
  try {
    nc = await connect({
      servers,
      name: opts.name,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 250,
      timeout: 5_000,
      ...opts.auth,
    });
  } catch (err) {
    throw new RetryableError(
      ErrorCode.Unavailable,
      `cannot reach NATS at ${String(servers)}: ${err instanceof Error ? err.message : String(err)}. Start nats-server with -js, or set NATS_URL.`,
      { cause: err },
    );
  }
  const jsm = await jetstreamManager(nc, { timeout: 10_000 });
  if (opts.ensure !== false) await ensureTopology(nc, jsm);
  const js = jetstream(nc, { timeout: 10_000 });
  const kvm = new Kvm(js);
  let opened: [KV, KV, KV, KV, KV, ObjectStore];
  try {
    opened = await Promise.all([
      kvm.open(Buckets.progress.name),
      kvm.open(Buckets.pacer.name),
      kvm.open(Buckets.budgets.name),
      kvm.open(Buckets.jobs.name),
      kvm.open(Buckets.control.name),
      new Objm(js).open(ObjectStores.blobs.name),
    ]);
  } catch (err) {
    await nc.close().catch(() => undefined);
    throw new RetryableError(
      ErrorCode.Unavailable,
      `NATS at ${String(servers)} does not have evalfleet's buckets (${err instanceof Error ? err.message : String(err)}): start the actors first (evalfleet up), which create them.`,
      { cause: err },
    );
  }
  const [progress, pacer, budgets, jobs, control, blobs] = opened;
  return {
    nc,
    js,
    jsm,
    kv: { progress, pacer, budgets, jobs, control },
    blobs,
    async close() {
      if (!nc.isClosed()) await nc.drain().catch(() => nc.close());
    },
  };
}
