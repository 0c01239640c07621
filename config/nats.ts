import { existsSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import { defineGroup, optionalFileText, optionalText, setting } from "./setting.js";

/**
 * The NATS connection every process opens: servers, one credential kind, TLS. A plain object — `plane/connect.ts`
 * (`openPlane`) turns it into nats.js options (reading the files it names); here it is only validated, once.
 */
export interface NatsSettings {
  /** server URLs (`nats://host:4222`, `tls://host:4222`, or `host:port`); the client fails over between them */
  servers: string[];
  /** false when `servers` is the local default (NATS_URL not given): a local plane may start its own server */
  configured: boolean;
  auth: NatsAuth;
  /** present when the connection must be TLS (any TLS_* setting, or a `tls://` server) */
  tls?: NatsTls;
  /**
   * The evalfleet account's signing key (NATS_ACCOUNT + NATS_SIGNING_KEY): a dispatcher mints each attempt's NATS
   * user with it (plane/nats-auth.ts). Never handed to a task.
   */
  signer?: { account: string; signingSeed: string };
  /** the inbox prefix replies come back on (a per-attempt user may subscribe only to its own) */
  inboxPrefix?: string;
}

/** Exactly one way to authenticate (nats.js supports each). */
export type NatsAuth =
  | { kind: "none" }
  /**
   * a `.creds` file: user JWT + nkey seed (decentralised auth, `nsc generate creds`); `-` (CREDS_ON_STDIN) for a
   * task whose launcher writes its per-attempt credential on its standard input
   */
  | { kind: "creds"; file: string }
  /** a user JWT and its nkey seed as values (NATS_JWT + NATS_NKEY_SEED: a per-attempt user handed over by ECS) */
  | { kind: "jwt"; jwt: string; seed: string }
  /** a file holding an nkey seed (`SU…`) */
  | { kind: "nkey"; seedFile: string }
  /** an nkey seed given as a value (a per-attempt task user handed over by its launcher) */
  | { kind: "nkey-seed"; seed: string }
  | { kind: "userpass"; user: string; pass: string }
  | { kind: "token"; token: string };

export interface NatsTls {
  /** CA bundle that signed the servers' certificates (else the system's roots) */
  caFile?: string;
  /** client certificate, for servers that verify clients (with keyFile) */
  certFile?: string;
  keyFile?: string;
}

export const DEFAULT_NATS_URL = "nats://127.0.0.1:4222";

/** The variables that carry a NATS user to a process its launcher starts (a task): see the settings below. */
export const NATS_USER_ENV = { creds: "NATS_CREDS", jwt: "NATS_JWT", seed: "NATS_NKEY_SEED" } as const;

/** NATS_CREDS value meaning "read the `.creds` text from standard input" (how a local task gets its credential). */
export const CREDS_ON_STDIN = "-";

const serverPattern = /^(?:(?:nats|tls|ws|wss):\/\/)?[^\s,/]+(?::\d{1,5})?\/?$/;

const serversText = z
  .string()
  .transform((s) =>
    s
      .split(",")
      .map((x) => x.trim())
      .filter(Boolean),
  )
  .pipe(
    z
      .array(
        z.string().regex(serverPattern, {
          error: "each server must be nats://host:port, tls://host:port or host:port",
        }),
      )
      .min(1, { error: "lists no server" }),
  );

export const natsGroup = defineGroup({
  name: "nats",
  doc: "The NATS JetStream connection (every process). Set at most one credential kind.",
  settings: {
    url: setting({
      env: "NATS_URL",
      doc: "NATS server URLs, comma-separated (a cluster's nodes); a `tls://` URL requires TLS",
      schema: serversText,
      default: DEFAULT_NATS_URL,
      hint: "e.g. nats://nats-0:4222,nats://nats-1:4222",
    }),
    creds: setting({
      env: "NATS_CREDS",
      doc: "path of a NATS `.creds` file (user JWT and nkey seed); `-`: read it from standard input (a task's launcher writes its attempt's credential there)",
      schema: z.union([z.literal(CREDS_ON_STDIN), optionalFileText]),
    }),
    nkey: setting({
      env: "NATS_NKEY",
      doc: "path of a file holding an nkey seed (`SU…`)",
      schema: optionalFileText,
    }),
    nkeySeed: setting({
      env: "NATS_NKEY_SEED",
      doc: "an nkey seed as a value (a per-attempt task user given by its launcher)",
      schema: z
        .string()
        .regex(/^SU[A-Z2-7]{56}$/, { error: "is not a user nkey seed (SU followed by 56 base32 characters)" })
        .optional(),
      secret: true,
    }),
    jwt: setting({
      env: "NATS_JWT",
      doc: "a NATS user JWT as a value, with NATS_NKEY_SEED (a per-attempt task user given by its launcher)",
      schema: z
        .string()
        .regex(/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/, { error: "is not a JWT" })
        .optional(),
      secret: true,
    }),
    account: setting({
      env: "NATS_ACCOUNT",
      doc: "the public key (A…) of evalfleet's NATS account, with NATS_SIGNING_KEY (the dispatcher)",
      schema: z
        .string()
        .regex(/^A[A-Z2-7]{55}$/, {
          error: "is not an account public key (A followed by 55 base32 characters)",
        })
        .optional(),
    }),
    signingKey: setting({
      env: "NATS_SIGNING_KEY",
      doc: "a signing key seed (SA…) of evalfleet's NATS account: the dispatcher mints each attempt's NATS user with it",
      schema: z
        .string()
        .regex(/^SA[A-Z2-7]{56}$/, {
          error: "is not an account nkey seed (SA followed by 56 base32 characters)",
        })
        .optional(),
      secret: true,
    }),
    user: setting({ env: "NATS_USER", doc: "NATS user name (with NATS_PASSWORD)", schema: optionalText }),
    password: setting({
      env: "NATS_PASSWORD",
      doc: "NATS password (with NATS_USER)",
      schema: optionalText,
      secret: true,
    }),
    token: setting({ env: "NATS_TOKEN", doc: "NATS auth token", schema: optionalText, secret: true }),
    tlsCa: setting({
      env: "NATS_TLS_CA",
      doc: "path of the CA bundle for the servers' certificates (turns TLS on)",
      schema: optionalFileText,
    }),
    tlsCert: setting({
      env: "NATS_TLS_CERT",
      doc: "path of a client certificate, with NATS_TLS_KEY (turns TLS on)",
      schema: optionalFileText,
    }),
    tlsKey: setting({
      env: "NATS_TLS_KEY",
      doc: "path of the client certificate's private key, with NATS_TLS_CERT",
      schema: optionalFileText,
    }),
  },
  compile(v, ctx): NatsSettings {
    const given = (
      [
        ["NATS_CREDS", v.creds],
        ["NATS_NKEY", v.nkey],
        ["NATS_NKEY_SEED", v.jwt === undefined ? v.nkeySeed : undefined],
        ["NATS_JWT", v.jwt],
        ["NATS_USER", v.user ?? v.password],
        ["NATS_TOKEN", v.token],
      ] as const
    ).filter(([, x]) => x !== undefined);
    if (given.length > 1)
      ctx.issue(
        given.map(([k]) => k).join(","),
        `more than one NATS credential kind is set (${given.map(([k]) => k).join(", ")}); set exactly one`,
      );
    if (v.user !== undefined && v.password === undefined)
      ctx.issue("NATS_PASSWORD", "is not set but NATS_USER is: set both, or neither");
    if (v.password !== undefined && v.user === undefined)
      ctx.issue("NATS_USER", "is not set but NATS_PASSWORD is: set both, or neither");
    if (v.jwt !== undefined && v.nkeySeed === undefined)
      ctx.issue("NATS_NKEY_SEED", "is not set but NATS_JWT is: a user JWT needs its nkey seed");
    if ((v.account === undefined) !== (v.signingKey === undefined))
      ctx.issue(
        v.account === undefined ? "NATS_ACCOUNT" : "NATS_SIGNING_KEY",
        "minting attempt users needs both NATS_ACCOUNT and NATS_SIGNING_KEY: set both, or neither",
      );
    if ((v.tlsCert === undefined) !== (v.tlsKey === undefined))
      ctx.issue(
        v.tlsCert === undefined ? "NATS_TLS_CERT" : "NATS_TLS_KEY",
        "a client certificate needs both NATS_TLS_CERT and NATS_TLS_KEY: set both, or neither",
      );

    // A local plane (`up`, `start`) keeps its plane user's credential with its state: every command finds it there.
    const stateDir = ctx.value<string>("EVALFLEET_STATE_DIR");
    const localCreds = stateDir === undefined ? undefined : localPlaneCredsFile(stateDir);
    const auth: NatsAuth =
      v.jwt !== undefined
        ? { kind: "jwt", jwt: v.jwt, seed: v.nkeySeed ?? "" }
        : v.creds !== undefined
          ? { kind: "creds", file: v.creds }
          : v.nkey !== undefined
            ? { kind: "nkey", seedFile: v.nkey }
            : v.nkeySeed !== undefined
              ? { kind: "nkey-seed", seed: v.nkeySeed }
              : v.user !== undefined
                ? { kind: "userpass", user: v.user, pass: v.password ?? "" }
                : v.token !== undefined
                  ? { kind: "token", token: v.token }
                  : localCreds !== undefined && existsSync(localCreds)
                    ? { kind: "creds", file: localCreds }
                    : { kind: "none" };
    const servers = v.url;
    const configured = ctx.source("NATS_URL") !== "default";
    const wantsTls =
      v.tlsCa !== undefined ||
      v.tlsCert !== undefined ||
      v.tlsKey !== undefined ||
      servers.some((s) => s.startsWith("tls://"));
    const out: NatsSettings = { servers, configured, auth };
    if (v.account !== undefined && v.signingKey !== undefined)
      out.signer = { account: v.account, signingSeed: v.signingKey };
    if (!wantsTls) return out;
    const tls: NatsTls = {};
    if (v.tlsCa !== undefined) tls.caFile = v.tlsCa;
    if (v.tlsCert !== undefined) tls.certFile = v.tlsCert;
    if (v.tlsKey !== undefined) tls.keyFile = v.tlsKey;
    return { ...out, tls };
  },
});

/** Where a local plane (`up`, `start`) keeps its plane user's `.creds` under its state folder. */
export function localPlaneCredsFile(stateDir: string): string {
  return join(stateDir, "nats", "plane.creds");
}

/** NATS settings for a server this process started itself (the local launcher, tests). */
export function natsAt(
  servers: string | readonly string[],
  opts: { auth?: NatsAuth; signer?: NatsSettings["signer"] } = {},
): NatsSettings {
  const list = typeof servers === "string" ? servers.split(",").map((s) => s.trim()) : [...servers];
  return {
    servers: list.filter(Boolean),
    configured: true,
    auth: opts.auth ?? { kind: "none" },
    ...(opts.signer ? { signer: opts.signer } : {}),
  };
}

/**
 * Where a task's NATS is, without any credential: a task gets its own per-attempt credential from its launcher,
 * never the launcher's (TLS CA included, so it can check the servers).
 */
export function natsServerEnv(s: NatsSettings): Record<string, string> {
  const env: Record<string, string> = { NATS_URL: s.servers.join(",") };
  if (s.tls?.caFile) env.NATS_TLS_CA = s.tls.caFile;
  return env;
}

/**
 * The variables that give a child process this same connection: the inverse of the group above, so the names live
 * here only. (Not for tasks: see natsServerEnv.)
 */
export function natsEnv(s: NatsSettings): Record<string, string> {
  const env: Record<string, string> = { NATS_URL: s.servers.join(",") };
  const a = s.auth;
  if (a.kind === "creds") env.NATS_CREDS = a.file;
  else if (a.kind === "jwt") {
    env.NATS_JWT = a.jwt;
    env.NATS_NKEY_SEED = a.seed;
  } else if (a.kind === "nkey") env.NATS_NKEY = a.seedFile;
  else if (a.kind === "nkey-seed") env.NATS_NKEY_SEED = a.seed;
  else if (a.kind === "userpass") {
    env.NATS_USER = a.user;
    env.NATS_PASSWORD = a.pass;
  } else if (a.kind === "token") env.NATS_TOKEN = a.token;
  if (s.tls?.caFile) env.NATS_TLS_CA = s.tls.caFile;
  if (s.tls?.certFile) env.NATS_TLS_CERT = s.tls.certFile;
  if (s.tls?.keyFile) env.NATS_TLS_KEY = s.tls.keyFile;
  return env;
}
