import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { z } from "zod";
import {
  defineGroup,
  enumText,
  httpUrlText,
  intText,
  optionalFileText,
  optionalText,
  portText,
  setting,
} from "./setting.js";

/** Groups most roles share: logging, the database, topology, the gateway's address, the embedded state folder. */

export const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** Logging: a service logs at info by default, an operator command at warn (its output is the answer). */
export function logGroup(defaultLevel: LogLevel) {
  return defineGroup({
    name: "log",
    doc: "Logging (JSON lines on stderr, secrets scrubbed).",
    settings: {
      level: setting({
        env: "EVALFLEET_LOG_LEVEL",
        doc: "log level: fatal, error, warn, info, debug, trace or silent",
        schema: enumText(LOG_LEVELS),
        default: defaultLevel,
      }),
    },
    compile: (v): { level: LogLevel } => ({ level: v.level }),
  });
}

/** What a process hands on to the processes it starts, captured once at start. */
export interface HostSettings {
  /**
   * The environment this process was started with, to hand on to child processes (a harness, a task, git, the
   * grader's test run). Never read for settings: every setting is a typed field of its role.
   */
  inheritedEnv: Readonly<Record<string, string>>;
  /** the operator's login name, recorded on control requests */
  user: string;
}

export const hostGroup = defineGroup({
  name: "host",
  doc: "The environment handed on to child processes.",
  settings: {},
  compile: (_v, ctx): HostSettings => {
    const inheritedEnv: Record<string, string> = {};
    for (const [k, v] of Object.entries(ctx.env)) if (typeof v === "string") inheritedEnv[k] = v;
    return { inheritedEnv, user: inheritedEnv.USER ?? inheritedEnv.LOGNAME ?? "unknown" };
  },
});

// ---- the database ----

/** Where a process keeps durable state: PostgreSQL (shared by every process) or embedded PGlite (one process). */
export type DatabaseSettings =
  | { kind: "postgres"; url: string; label: string }
  | { kind: "pglite"; dataDir: string; label: string }
  | { kind: "none" };

/**
 * How a role may open its database — the rule that keeps a deployed process from losing its rows:
 * - `service` (every actor, the gateway, validate-env): PostgreSQL from DATABASE_URL or PG*; without them it
 *   refuses to start. An embedded PGlite only when the command is given its folder explicitly (`--data-dir`).
 * - `local` (`up`, `start`): PostgreSQL when configured, else embedded PGlite under `<state-dir>/pglite`.
 * - `reader` (report, dashboard): PostgreSQL when configured, else the PGlite a local plane left in
 *   `<state-dir>/pglite`, which must exist.
 * - `optional` (teardown): PostgreSQL when configured, else none (what needs it is skipped and said so).
 */
export type DatabaseMode = "service" | "local" | "reader" | "optional";

const SSL_MODES = ["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] as const;

/** A postgres:// URL from libpq's PG* variables (the form the stack passes from Secrets Manager). */
export function postgresUrlFromParts(p: {
  host: string;
  port?: number | undefined;
  user?: string | undefined;
  password?: string | undefined;
  database?: string | undefined;
  sslMode?: (typeof SSL_MODES)[number] | undefined;
  sslRootCert?: string | undefined;
}): string {
  const auth =
    p.user === undefined
      ? ""
      : `${encodeURIComponent(p.user)}${p.password === undefined ? "" : `:${encodeURIComponent(p.password)}`}@`;
  const socket = p.host.startsWith("/");
  const hostPart = socket
    ? ""
    : `${p.host.includes(":") ? `[${p.host}]` : p.host}${p.port ? `:${p.port}` : ""}`;
  const q = new URLSearchParams();
  if (socket) q.set("host", p.host);
  // libpq's meanings: `require` encrypts without checking the certificate (unless a root certificate is given);
  // node-postgres reads `require` as verify-full, so say which one is meant.
  if (p.sslMode === "require" || p.sslMode === "prefer" || p.sslMode === "allow")
    q.set("sslmode", p.sslRootCert ? "verify-ca" : "no-verify");
  else if (p.sslMode === "verify-ca" || p.sslMode === "verify-full") q.set("sslmode", p.sslMode);
  if (p.sslRootCert !== undefined) q.set("sslrootcert", p.sslRootCert);
  const query = q.toString();
  return `postgres://${auth}${hostPart}/${encodeURIComponent(p.database ?? p.user ?? "postgres")}${query ? `?${query}` : ""}`;
}

export function databaseGroup(mode: DatabaseMode) {
  const dataDir = {
    dataDir: setting({
      env: "EVALFLEET_DATA_DIR",
      flag: "data-dir",
      doc: "an embedded PGlite folder, explicitly (one process only; never a deployed role's fallback)",
      schema: optionalText,
    }),
  };
  const base = {
    url: setting({
      env: "DATABASE_URL",
      doc: "PostgreSQL connection URL (postgres://user:password@host:port/db); or the PG* variables",
      schema: z
        .string()
        .regex(/^postgres(ql)?:\/\//, { error: "must be a postgres:// or postgresql:// URL" })
        .optional(),
      secret: false,
    }),
    host: setting({
      env: "PGHOST",
      doc: "PostgreSQL host (or a socket folder); with the other PG* variables",
      schema: optionalText,
    }),
    port: setting({
      env: "PGPORT",
      doc: "PostgreSQL port",
      schema: intText(1, 65_535).optional(),
      defaultDoc: "5432",
    }),
    user: setting({ env: "PGUSER", doc: "PostgreSQL user", schema: optionalText }),
    password: setting({ env: "PGPASSWORD", doc: "PostgreSQL password", schema: optionalText, secret: true }),
    database: setting({
      env: "PGDATABASE",
      doc: "PostgreSQL database",
      schema: optionalText,
      defaultDoc: "PGUSER",
    }),
    sslMode: setting({
      env: "PGSSLMODE",
      doc: "TLS to PostgreSQL, with libpq's meanings (require: encrypted; verify-full: and the certificate checked)",
      schema: enumText(SSL_MODES).optional(),
    }),
    sslRootCert: setting({
      env: "PGSSLROOTCERT",
      doc: "CA bundle for verifying PostgreSQL's certificate (e.g. the RDS bundle)",
      schema: optionalFileText,
    }),
  };
  // `--data-dir` exists only where embedded PGlite is an explicit choice (a service); typed as the base set so
  // the compile step reads it through `values`.
  const settings = (mode === "service" ? { ...base, ...dataDir } : base) as typeof base;
  return defineGroup({
    name: "database",
    doc: {
      service:
        "PostgreSQL, required: DATABASE_URL or PGHOST (+ PGPORT, PGUSER, PGPASSWORD, PGDATABASE). Without them the process refuses to start; `--data-dir DIR` opens an embedded PGlite there instead, for one process only.",
      local:
        "PostgreSQL when DATABASE_URL or PGHOST is set; otherwise embedded PGlite under `<state-dir>/pglite`.",
      reader:
        "PostgreSQL when DATABASE_URL or PGHOST is set; otherwise the embedded PGlite a local plane keeps under `<state-dir>/pglite` (read it while that plane is stopped).",
      optional:
        "PostgreSQL when DATABASE_URL or PGHOST is set; otherwise what needs the database is skipped.",
    }[mode],
    settings,
    compile: (v, ctx): DatabaseSettings => {
      const values = v as typeof v & { dataDir?: string };
      const parts = [v.port, v.user, v.password, v.database, v.sslMode].some((x) => x !== undefined);
      if (v.url !== undefined && (v.host !== undefined || parts)) {
        ctx.issue(
          "DATABASE_URL,PGHOST",
          "both DATABASE_URL and PG* variables are set: use one (DATABASE_URL, or PGHOST with PGPORT, PGUSER, PGPASSWORD, PGDATABASE)",
        );
        return { kind: "none" };
      }
      if (v.host === undefined && parts) {
        ctx.issue(
          "PGHOST",
          "is not set, but other PG* variables are: set PGHOST to the database's host (or DATABASE_URL instead)",
        );
        return { kind: "none" };
      }
      if (v.url !== undefined) return { kind: "postgres", url: v.url, label: "PostgreSQL (DATABASE_URL)" };
      if (v.host !== undefined)
        return {
          kind: "postgres",
          url: postgresUrlFromParts({ ...v, host: v.host }),
          label: `PostgreSQL (PGHOST ${v.host}${v.port ? `:${v.port}` : ""})`,
        };
      const stateDir = ctx.value<string>("EVALFLEET_STATE_DIR");
      if (mode === "service") {
        if (values.dataDir !== undefined) {
          const dataDir = resolve(values.dataDir);
          return { kind: "pglite", dataDir, label: `embedded PGlite (${dataDir})` };
        }
        ctx.issue(
          "DATABASE_URL",
          "no database: this process shares its state with others, so it needs PostgreSQL. Set DATABASE_URL, or PGHOST with PGPORT, PGUSER, PGPASSWORD, PGDATABASE; for one process on one machine, pass --data-dir DIR (embedded PGlite). `evalfleet up` runs everything with an embedded database.",
        );
        return { kind: "none" };
      }
      if (mode === "optional") return { kind: "none" };
      const dataDir = resolve(stateDir ?? ".evalfleet", "pglite");
      if (mode === "reader" && !existsSync(dataDir)) {
        ctx.issue(
          "DATABASE_URL",
          `no results database: DATABASE_URL / PGHOST are not set and there is no embedded database at ${dataDir}. Set DATABASE_URL, or pass --state-dir where \`evalfleet start\` / \`up\` ran.`,
        );
        return { kind: "none" };
      }
      return { kind: "pglite", dataDir, label: `embedded PGlite (${dataDir})` };
    },
  });
}

/** The folder `up` / `start` keep embedded state in, and where operator commands look for it. */
export const stateGroup = defineGroup({
  name: "state",
  doc: "The embedded state folder of a local plane (PGlite, the NATS store, workdirs, git mirrors).",
  settings: {
    dir: setting({
      env: "EVALFLEET_STATE_DIR",
      flag: "state-dir",
      doc: "where `up` / `start` keep embedded state, and where operator commands find it",
      schema: z.string().min(1),
      default: ".evalfleet",
    }),
  },
  compile: (v): { dir: string } => ({ dir: resolve(v.dir) }),
});

/** JetStream replication, for every process that may create the topology. */
export const topologyGroup = defineGroup({
  name: "topology",
  doc: "The streams and buckets an actor creates when they are missing.",
  settings: {
    replicas: setting({
      env: "EVALFLEET_STREAM_REPLICAS",
      doc: "replicas of every stream and bucket (3 on a three-node cluster; at most the cluster's size)",
      schema: intText(1, 5),
      default: "1",
    }),
    maxBytes: setting({
      env: "EVALFLEET_STREAM_MAX_BYTES",
      doc: "each stream's (and the blob store's) size cap in bytes, 0 for none: a stream at its cap refuses new messages — the plane stops launching and says so — and never drops old ones; finished runs are pruned instead",
      schema: intText(0, Number.MAX_SAFE_INTEGER),
      default: "0",
    }),
  },
  compile: (v): { streamReplicas: number; streamMaxBytes: number } => ({
    streamReplicas: v.replicas,
    streamMaxBytes: v.maxBytes === 0 ? -1 : v.maxBytes,
  }),
});

/** How long a finished run's state stays in NATS (its rows stay in PostgreSQL for good). */
export const retentionGroup = defineGroup({
  name: "retention",
  doc: "When a finished run's messages, keys and blobs leave NATS; its rows stay in PostgreSQL.",
  settings: {
    pruneAfterHours: setting({
      env: "EVALFLEET_PRUNE_AFTER_HOURS",
      doc: "hours after a run finished (every cell ended, every score in) that the results-writer removes its streams' messages, KV keys and blobs; 0 keeps them for ever. Nothing unfinished is ever removed",
      schema: intText(0, 100_000),
      default: "168",
    }),
  },
  compile: (v): { pruneAfterMs: number | null } => ({
    pruneAfterMs: v.pruneAfterHours === 0 ? null : v.pruneAfterHours * 3_600_000,
  }),
});

export const DEFAULT_GATEWAY_URL = "http://127.0.0.1:8787";

/** Where the gateway answers, for the processes that call it. */
export const gatewayUrlGroup = defineGroup({
  name: "gateway-url",
  doc: "The gateway every model call goes through.",
  settings: {
    url: setting({
      env: "EVALFLEET_GATEWAY_URL",
      flag: "gateway-url",
      doc: "the gateway's base URL (harness tasks forward their calls there; `submit` checks it answers)",
      schema: httpUrlText,
      default: DEFAULT_GATEWAY_URL,
    }),
  },
  compile: (v): { url: string } => ({ url: v.url }),
});

/** A port and address to listen on. */
export function listenGroup(o: {
  name: string;
  what: string;
  envPrefix: string;
  host: string;
  port: string;
  /** the CLI flags (default `host`, `port`) */
  flags?: { host?: string; port?: string };
}) {
  return defineGroup({
    name: o.name,
    doc: `Where the ${o.what} listens.`,
    settings: {
      host: setting({
        env: `${o.envPrefix}_HOST`,
        flag: o.flags?.host ?? "host",
        doc: `address the ${o.what} binds (0.0.0.0 in a container)`,
        schema: z.string().min(1),
        default: o.host,
      }),
      port: setting({
        env: `${o.envPrefix}_PORT`,
        flag: o.flags?.port ?? "port",
        doc: `port the ${o.what} listens on (0: any free port)`,
        schema: portText(),
        default: o.port,
      }),
    },
    compile: (v): { host: string; port: number } => ({ host: v.host, port: v.port }),
  });
}

/** Where an actor process serves Prometheus /metrics: off unless a port is given (the gateway serves its own). */
export const metricsGroup = defineGroup({
  name: "metrics",
  doc: "Prometheus /metrics of an actor process (the gateway, and `up`, serve it on the gateway's port).",
  settings: {
    host: setting({
      env: "EVALFLEET_METRICS_HOST",
      doc: "address the actor's /metrics listener binds (0.0.0.0 in a container)",
      schema: z.string().min(1),
      default: "127.0.0.1",
    }),
    port: setting({
      env: "EVALFLEET_METRICS_PORT",
      doc: "port of the actor's /metrics listener (0: any free port, logged); unset: no listener",
      schema: portText().optional(),
    }),
  },
  compile: (v): { host: string; port: number | null } => ({ host: v.host, port: v.port ?? null }),
});

/** Optional OpenTelemetry export of model calls (the gateway's). */
export const otelGroup = defineGroup({
  name: "otel",
  doc: "OpenTelemetry export of model calls: a span per call the gateway forwards, with the GenAI semantic conventions.",
  settings: {
    endpoint: setting({
      env: "EVALFLEET_OTEL_ENDPOINT",
      doc: "an OTLP/HTTP collector's base URL (spans go to <url>/v1/traces as JSON); unset: no export",
      schema: z.string().url({ error: "must be a URL like http://collector:4318" }).optional(),
    }),
  },
  compile: (v): { endpoint: string | null } => ({ endpoint: v.endpoint ?? null }),
});
