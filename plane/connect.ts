import { readFileSync } from "node:fs";
import { type JetStreamClient, type JetStreamManager, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { type KV, Kvm } from "@nats-io/kv";
import { type ObjectStore, Objm } from "@nats-io/obj";
import {
  type ConnectionOptions,
  connect,
  createInbox,
  credsAuthenticator,
  jwtAuthenticator,
  type NatsConnection,
  nkeyAuthenticator,
} from "@nats-io/transport-node";
import { CREDS_ON_STDIN, DEFAULT_NATS_URL, type NatsSettings } from "../config/nats.js";
import { retry } from "../lib/retry.js";
import { ErrorCode, RetryableError } from "../protocol/errors.js";
import { ApiSubjects, StateKeys } from "../protocol/subjects.js";
import { Buckets, ObjectStores } from "../protocol/topology.js";
import { ensureTopology } from "./topology.js";

/** Everything an actor needs from NATS, opened once. */
export interface Plane {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  kv: { progress: KV; pacer: KV; budgets: KV; jobs: KV; control: KV };
  blobs: ObjectStore;
  close(): Promise<void>;
}

/** nats.js options for the settings' servers, credential and TLS (files are read here, at connect). */
export function natsConnectOptions(
  s: NatsSettings,
): Pick<ConnectionOptions, "servers" | "user" | "pass" | "token" | "authenticator" | "tls" | "inboxPrefix"> {
  const o: ReturnType<typeof natsConnectOptions> = { servers: s.servers };
  const a = s.auth;
  // `-`: the launcher wrote it on our stdin (read once: a process opens its plane once)
  if (a.kind === "creds")
    o.authenticator = credsAuthenticator(readFileSync(a.file === CREDS_ON_STDIN ? 0 : a.file));
  else if (a.kind === "jwt") o.authenticator = jwtAuthenticator(a.jwt, new TextEncoder().encode(a.seed));
  else if (a.kind === "nkey")
    o.authenticator = nkeyAuthenticator(new TextEncoder().encode(readFileSync(a.seedFile, "utf8").trim()));
  else if (a.kind === "nkey-seed") o.authenticator = nkeyAuthenticator(new TextEncoder().encode(a.seed));
  else if (a.kind === "userpass") {
    o.user = a.user;
    o.pass = a.pass;
  } else if (a.kind === "token") o.token = a.token;
  if (s.tls) o.tls = { ...s.tls };
  if (s.inboxPrefix) o.inboxPrefix = s.inboxPrefix;
  return o;
}

/** A fresh inbox subject under the connection's own inbox prefix (a per-attempt user may hear only its own). */
export function inboxOf(nc: NatsConnection): string {
  return createInbox((nc as { options?: ConnectionOptions }).options?.inboxPrefix);
}

/**
 * The one way a process opens a NATS connection: the settings' servers, credential and TLS; reconnecting for ever
 * (a long-lived process) or not at all (a probe, a one-shot command). A server that does not answer is a
 * RetryableError that says where evalfleet looked and what to do.
 */
export async function connectNats(
  nats: NatsSettings | { servers: string | string[] },
  opts: {
    name: string;
    /** false: one try, no reconnects (probes, one-shot commands) */
    reconnect?: boolean;
    timeoutMs?: number;
    /** credentials (or an inbox prefix) on top of the settings (a server this process started itself) */
    auth?: Pick<ConnectionOptions, "user" | "pass" | "authenticator" | "inboxPrefix">;
  },
): Promise<NatsConnection> {
  const base = "auth" in nats ? natsConnectOptions(nats) : { servers: nats.servers };
  try {
    return await connect({
      ...base,
      name: opts.name,
      timeout: opts.timeoutMs ?? 5_000,
      // Otherwise every request (each KV get and put, each JetStream publish) builds two Errors up front, stacks
      // captured, in case it fails: a fifth of an actor's CPU in bench:plane's profile. Our errors say what failed.
      noAsyncTraces: true,
      ...(opts.reconnect === false
        ? { maxReconnectAttempts: 0 }
        : { maxReconnectAttempts: -1, reconnectTimeWait: 250 }),
      ...opts.auth,
    });
  } catch (err) {
    throw new RetryableError(
      ErrorCode.Unavailable,
      `cannot reach NATS at ${String(base.servers)}: ${err instanceof Error ? err.message : String(err)}. Start nats-server with -js (or \`evalfleet up\`), or set NATS_URL and its credentials.`,
      { cause: err },
    );
  }
}

/**
 * Connect, make sure the topology exists (idempotent; `ensure: false` for a process started after the actors made
 * it, like a harness task: 20,000 of them re-checking every stream would be 20,000 rounds of JetStream API calls) and
 * open the buckets. A server that does not answer is a
 * RetryableError that says where evalfleet looked.
 */
export async function openPlane(opts: {
  /** the connection from the role's settings (servers, credential, TLS) */
  nats?: NatsSettings;
  /** servers alone, for a server this process started itself (tests, the local launcher) */
  servers?: string | string[];
  name: string;
  ensure?: boolean;
  /** replicas of the streams this process creates when missing (the role's topology setting) */
  streamReplicas?: number;
  /** each stream's size cap (the role's topology setting; -1 for none) */
  streamMaxBytes?: number;
  /** credentials, for a server with accounts (a test's own users) */
  auth?: Pick<ConnectionOptions, "user" | "pass" | "authenticator" | "inboxPrefix">;
  /**
   * This process is one attempt's task, connected as that attempt's NATS user: it may not use the JetStream API
   * beyond its own keys and subjects (plane/nats-auth.ts), so nothing is checked or created, buckets are bound
   * without a round trip, KV gets are direct gets, and replies come to the attempt's own inbox prefix.
   */
  attempt?: { run: string; cell: string; attempt: number };
}): Promise<Plane> {
  const scoped = opts.attempt;
  const servers = opts.servers ?? opts.nats?.servers ?? DEFAULT_NATS_URL;
  const nc = await connectNats(opts.nats && opts.servers === undefined ? opts.nats : { servers }, {
    name: opts.name,
    auth: {
      ...(scoped ? { inboxPrefix: ApiSubjects.attemptInbox(scoped.run, scoped.cell, scoped.attempt) } : {}),
      ...opts.auth,
    },
  });
  let jsm: JetStreamManager;
  try {
    jsm = await jetstreamManager(nc, { timeout: 10_000, ...(scoped ? { checkAPI: false } : {}) });
  } catch (err) {
    await nc.close().catch(() => undefined);
    throw new RetryableError(
      ErrorCode.Unavailable,
      `NATS at ${String(servers)} has no JetStream for this user (${err instanceof Error ? err.message : String(err)})`,
      { cause: err },
    );
  }
  if (opts.ensure !== false && !scoped)
    // A JetStream cluster answers its API only once it has a meta leader, and slowly while several processes make
    // the same topology at once (a deployed plane's actors and gateways all start together): a request that times
    // out is tried again, for up to about a minute, instead of ending the process.
    await retry(
      () =>
        ensureTopology(nc, jsm, {
          ...(opts.streamReplicas === undefined ? {} : { streamReplicas: opts.streamReplicas }),
          ...(opts.streamMaxBytes === undefined ? {} : { streamMaxBytes: opts.streamMaxBytes }),
        }),
      { tries: 8, baseMs: 1_000, maxMs: 15_000, retryError: isApiTimeout },
    ).catch(async (err: unknown) => {
      // Nothing opened may outlive the failure: an open connection would keep the process alive and silent.
      await nc.close().catch(() => undefined);
      throw err;
    });
  const js = jetstream(nc, { timeout: 10_000, ...(scoped ? { checkAPI: false } : {}) });
  const kvm = new Kvm(js);
  // An attempt's user reads by direct get (the key in the subject) and never asks for a store's info.
  const kvOpts = scoped ? { allow_direct: true } : {};
  let opened: [KV, KV, KV, KV, KV, ObjectStore];
  try {
    opened = await Promise.all([
      kvm.open(Buckets.progress.name, { ...kvOpts }),
      kvm.open(Buckets.pacer.name, { ...kvOpts }),
      kvm.open(Buckets.budgets.name, { ...kvOpts }),
      kvm.open(Buckets.jobs.name, { ...kvOpts }),
      kvm.open(Buckets.control.name, { ...kvOpts }),
      new Objm(js).open(ObjectStores.blobs.name, !scoped),
    ]);
    // An attempt's user may not ask for a bucket's info: reading its own job (allowed; absent is fine) tells
    // whether the buckets are there at all.
    if (scoped) await opened[3].get(StateKeys.job(scoped.run, scoped.cell));
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

/** A JetStream API request that got no answer in time (no meta leader yet, or a cluster busy creating streams). */
function isApiTimeout(err: unknown): boolean {
  const e = err as { name?: string; message?: string } | null;
  return (
    e?.name === "TimeoutError" ||
    /timeout|no responders|jetstream (is )?not (ready|available)/i.test(e?.message ?? "")
  );
}
