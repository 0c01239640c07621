import { ProgressKeys, StateKeys, Subjects } from "../../protocol/subjects.js";
import { Buckets } from "../../protocol/topology.js";

/**
 * The NATS authorization for evalfleet, generated so the deployed servers and the integration tests (with a real
 * nats-server) use the same text. Three accounts, one per role:
 *
 * - ACTORS holds JetStream (every stream, bucket and object store) and the actor users.
 * - GATEWAY holds the gateway replicas; it reaches the pacer buckets through imports.
 * - TASKS holds one user per attempt. A task user may publish only its own attempt's subjects: its ledger and
 *   attempt-result subjects, its own progress key, reads of its own job (its cell, its run's config and key, its
 *   task's spec: what `evalfleet task` fetches), and its pool's pacer key. Everything else is denied by omission. Those subjects reach ACTORS' streams through service imports (so JetStream's publish
 *   acks and direct-get replies come back), and each user's replies arrive on its own inbox prefix, so one task can
 *   never read another's.
 *
 * Per-attempt users are static config (nats-server 2.9 applies permission templates only to JWT users): the
 * dispatcher adds a task's user (an nkey, so no secret lands in the config) before launching it and reloads.
 */

/** A password in the config: a `$VAR` reference resolved from the server's environment, or a bcrypt hash. */
export type Secret = { env: string } | { bcrypt: string };

export interface TaskIdentity {
  run: string;
  cell: string;
  attempt: number;
  pool: string;
  /** the cell's task id: the task reads that one spec of its run */
  task: string;
}

export interface TaskCredential {
  task: TaskIdentity;
  /** The task's nkey public key (U…); the seed stays with the task. */
  nkey: string;
}

export interface NatsAuthInput {
  actors: Array<{ user: string; password: Secret }>;
  gateway: Array<{ user: string; password: Secret }>;
  tasks: TaskCredential[];
  /** The system account user, for monitoring and `nats server` commands. */
  system?: { user: string; password: Secret };
}

export interface Permissions {
  publish: { allow: string[] };
  subscribe: { allow: string[] };
}

const kv = (bucket: string, key: string): string => `$KV.${bucket}.${key}`;
const directGet = (bucket: string, key: string): string =>
  `$JS.API.DIRECT.GET.KV_${bucket}.${kv(bucket, key)}`;
const streamInfo = (bucket: string): string => `$JS.API.STREAM.INFO.KV_${bucket}`;

/** The inbox prefix a task user must connect with (nats.js `inboxPrefix`): replies to it go there and nowhere else. */
export function taskInboxPrefix(t: TaskIdentity): string {
  return `_INBOX_${taskUserName(t).replace(/[^A-Za-z0-9_-]/g, "_")}`;
}

export function taskUserName(t: TaskIdentity): string {
  return `task.${Subjects.ledger.one(t.run, t.cell).slice("ledger.".length)}.${t.attempt}`;
}

/** What one attempt's task may do, and nothing more. */
export function taskPermissions(t: TaskIdentity): Permissions {
  return {
    publish: {
      allow: [
        Subjects.ledger.one(t.run, t.cell),
        Subjects.attempts.one(t.run, t.cell),
        kv(Buckets.progress.name, ProgressKeys.cell(t.run, t.cell)),
        directGet(Buckets.jobs.name, StateKeys.job(t.run, t.cell)),
        directGet(Buckets.jobs.name, StateKeys.jobRun(t.run)),
        directGet(Buckets.jobs.name, StateKeys.jobTask(t.run, t.task)),
        directGet(Buckets.jobs.name, StateKeys.runKey(t.run)),
        kv(Buckets.pacer.name, StateKeys.pacerPool(t.pool)),
        directGet(Buckets.pacer.name, StateKeys.pacerPool(t.pool)),
        // Opening a KV handle reads the bucket's config; the info carries no keys or values.
        ...[Buckets.progress.name, Buckets.jobs.name, Buckets.pacer.name].map(streamInfo),
      ],
    },
    subscribe: { allow: [`${taskInboxPrefix(t)}.>`, Subjects.attemptSignal(t.run, t.cell, t.attempt)] },
  };
}

/** Subjects TASKS users can reach in ACTORS (the union of what any task may publish; users narrow it). */
const TASK_SERVICES = [
  Subjects.ledger.all,
  Subjects.attempts.all,
  `$KV.${Buckets.progress.name}.cell.>`,
  `$JS.API.DIRECT.GET.KV_${Buckets.jobs.name}.>`,
  `$KV.${Buckets.pacer.name}.>`,
  `$JS.API.DIRECT.GET.KV_${Buckets.pacer.name}.>`,
  ...[Buckets.progress.name, Buckets.jobs.name, Buckets.pacer.name].map(streamInfo),
];
const GATEWAY_SERVICES = [
  `$KV.${Buckets.pacer.name}.>`,
  `$JS.API.DIRECT.GET.KV_${Buckets.pacer.name}.>`,
  `$KV.${Buckets.progress.name}.>`,
  streamInfo(Buckets.pacer.name),
  streamInfo(Buckets.progress.name),
];
const SIGNALS = "signal.>";

/** The `accounts { … }` block as a plain object (rendered by `renderNatsConf`). */
export function natsAuthorization(input: NatsAuthInput): Record<string, unknown> {
  const users = (list: Array<{ user: string; password: Secret }>) =>
    list.map((u) => ({ user: u.user, password: u.password }));
  const accounts: Record<string, unknown> = {
    ACTORS: {
      jetstream: "enabled",
      users: users(input.actors),
      exports: [
        ...[...new Set([...TASK_SERVICES, ...GATEWAY_SERVICES])].map((subject) => ({ service: subject })),
        { stream: SIGNALS },
      ],
    },
    GATEWAY: {
      users: users(input.gateway),
      imports: GATEWAY_SERVICES.map((subject) => ({ service: { account: "ACTORS", subject } })),
    },
    TASKS: {
      users: input.tasks.map((c) => ({ nkey: c.nkey, permissions: taskPermissions(c.task) })),
      imports: [
        ...TASK_SERVICES.map((subject) => ({ service: { account: "ACTORS", subject } })),
        { stream: { account: "ACTORS", subject: SIGNALS } },
      ],
    },
  };
  if (input.system) accounts.SYS = { users: users([input.system]) };
  return { accounts, ...(input.system ? { system_account: "SYS" } : {}) };
}

/** Render a config object in nats-server's syntax. `{ env: "X" }` becomes an unquoted `$X` variable reference. */
export function renderNatsConf(obj: Record<string, unknown>, indent = ""): string {
  const lines: string[] = [];
  for (const [k, v] of Object.entries(obj)) {
    if (v === undefined) continue;
    lines.push(`${indent}${key(k)}: ${value(v, indent)}`);
  }
  return lines.join("\n");
}

function key(k: string): string {
  return /^[A-Za-z_][A-Za-z0-9_]*$/.test(k) ? k : JSON.stringify(k);
}

function value(v: unknown, indent: string): string {
  const next = `${indent}  `;
  if (typeof v === "string") return JSON.stringify(v);
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  if (Array.isArray(v)) {
    if (v.length === 0) return "[]";
    return `[\n${v.map((x) => `${next}${value(x, next)}`).join("\n")}\n${indent}]`;
  }
  if (v && typeof v === "object") {
    const o = v as Record<string, unknown>;
    if (typeof o.env === "string" && Object.keys(o).length === 1) return `$${o.env}`;
    if (typeof o.bcrypt === "string" && Object.keys(o).length === 1) return JSON.stringify(o.bcrypt);
    return `{\n${renderNatsConf(o, next)}\n${indent}}`;
  }
  throw new Error(`cannot render ${String(v)} in a nats config`);
}

export interface NatsServerOptions {
  serverName: string;
  /** Every node's cluster address host (DNS names), this one included. */
  peers: string[];
  storeDir: string;
  /** Max JetStream file storage, bytes. */
  maxFileStore: number;
  /** The route password (literal; the deployed config carries a placeholder the host fills from Secrets Manager). */
  routePassword: string;
  /** Path of the authorization file (accounts), included so it can be replaced and reloaded on its own. */
  authFile: string;
}

/** One node's nats-server config: client port, clustered JetStream over routes, monitoring, included accounts. */
export function natsServerConfig(o: NatsServerOptions): string {
  const conf = {
    server_name: o.serverName,
    listen: "0.0.0.0:4222",
    http: "0.0.0.0:8222",
    max_payload: 1048576,
    jetstream: { store_dir: o.storeDir, max_file_store: o.maxFileStore, max_memory_store: 268435456 },
    cluster: {
      name: "evalfleet",
      listen: "0.0.0.0:6222",
      // Routes authenticate too: a host that can reach 6222 must not be able to join the cluster.
      authorization: { user: "route", password: o.routePassword },
      routes: o.peers.map((p) => `nats-route://route:${encodeURIComponent(o.routePassword)}@${p}:6222`),
    },
  };
  return `${renderNatsConf(conf)}\ninclude ${JSON.stringify(o.authFile)}\n`;
}
