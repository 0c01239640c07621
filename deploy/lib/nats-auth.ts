/**
 * The deployed NATS cluster's authorization: the same operator mode `evalfleet up` and the tests run
 * (plane/nats-auth.ts), so nothing connects anonymously and the dispatcher mints each attempt's user.
 *
 * The keys are made once per deployment (`evalfleet nats-accounts DIR`) and kept in Secrets Manager, never in
 * the template (deploy/lib/data.ts `natsSecrets`):
 *
 * - `server-auth`: the operator-mode lines (operator JWT, system account, the resolver preload with both accounts'
 *   JWTs). Public keys and signed claims only; each NATS node writes it to /etc/nats/auth.conf at boot.
 * - `plane`: `{"jwt","seed"}` of the plane user (every permission in the account): actors, gateway and eval workers
 *   get it as NATS_JWT + NATS_NKEY_SEED.
 * - `signer`: `{"account","signingKey"}`: the account's public key and a signing key seed. The dispatcher alone gets it
 *   (NATS_ACCOUNT + NATS_SIGNING_KEY) and mints with it, per attempt, a user JWT that expires with the attempt and
 *   may only do that attempt's things; the ECS backend hands it to the attempt's task container (docs/security.md §5).
 *
 * A user signed with the signing key is accepted by every node without a restart or reload: a node checks its
 * signature against the account JWT it already has. The operator and account seeds are needed only to re-sign the
 * accounts (rotation), so they stay with whoever ran `evalfleet nats-accounts`.
 */

export { type DeployedNatsSecrets, deployedNatsSecrets } from "../../plane/nats-auth.js";

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
  /**
   * The authorization file (accounts), included so it can be replaced and reloaded on its own. nats-server reads
   * an include relative to the including file's folder (an absolute path is joined to it, not used as is), so
   * this is a name beside the server config.
   */
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
  if (o.authFile.includes("/"))
    throw new Error(
      `authFile must be a file name beside the server config (nats-server joins include paths to its folder), got ${o.authFile}`,
    );
  return `${renderNatsConf(conf)}\ninclude ${JSON.stringify(o.authFile)}\n`;
}
