/**
 * NATS decentralized (JWT) auth, the one scheme every evalfleet nats-server runs: `evalfleet up`, `start`, the tests'
 * servers and the deployed cluster. No server evalfleet writes a config for accepts an anonymous connection.
 *
 * - An **operator** (its JWT in the server config) vouches for two accounts, preloaded into a memory resolver:
 *   `SYS` (the system account nats-server 2.9 requires in operator mode) and `EVALFLEET` (JetStream, everything).
 * - `EVALFLEET` has a **signing key**. The plane's own processes connect as a *plane user* (a `.creds` file, full
 *   access in the account). The dispatcher holds the signing key and mints, for each attempt it launches, a user
 *   JWT that expires with the attempt and may do only that attempt's own things (`attemptPermissions`). The server
 *   accepts such a user without a restart or reload: it checks the JWT's signature against the account's keys.
 *
 * The keys and JWTs are made once per server (`createNatsAccounts`) and kept with its store: JetStream keeps an
 * account's data under the account's public key, so a restarted server must get the same accounts back.
 */
import { Algorithms, encodeAccount, encodeOperator, encodeUser, fmtCreds } from "@nats-io/jwt";
import { createAccount, createOperator, createUser, fromSeed } from "@nats-io/nkeys";
import { ApiSubjects, BlobNames, ProgressKeys, StateKeys, Subjects } from "../protocol/subjects.js";
import { Buckets, ObjectStores } from "../protocol/topology.js";

/** Everything a server and the plane need: seeds (secret) and the JWTs they signed. Stored as JSON, mode 0600. */
export interface NatsAccounts {
  operator: { seed: string; jwt: string };
  system: { seed: string; jwt: string; publicKey: string };
  account: { seed: string; jwt: string; publicKey: string };
  /** the account's signing key: whoever holds it can mint users of the account (the dispatcher) */
  signingSeed: string;
}

/** What minting a user needs: the account it belongs to and a signing key of that account. */
export interface AccountSigner {
  /** the account's public key (A…) */
  account: string;
  /** a signing key's seed (SA…) listed in the account's JWT */
  signingSeed: string;
}

/** One attempt, as its NATS user is bound to it. */
export interface AttemptIdentity {
  run: string;
  cell: string;
  attempt: number;
  /** the cell's task id: the attempt reads that one task spec of its run */
  task: string;
}

/** The name of the account that holds evalfleet's JetStream. */
export const ACCOUNT_NAME = "EVALFLEET";

const text = (b: Uint8Array) => new TextDecoder().decode(b);

/** Make an operator, the system account and evalfleet's account with one signing key. */
export async function createNatsAccounts(): Promise<NatsAccounts> {
  const op = createOperator();
  const sys = createAccount();
  const acc = createAccount();
  const signing = createAccount();
  const operatorJwt = await encodeOperator("evalfleet", op, { system_account: sys.getPublicKey() });
  const systemJwt = await encodeAccount("SYS", sys, {}, { signer: op });
  const accountJwt = await encodeAccount(
    ACCOUNT_NAME,
    acc,
    {
      signing_keys: [signing.getPublicKey()],
      // JetStream is off for an account unless its limits turn it on; -1 is "no limit".
      limits: {
        mem_storage: -1,
        disk_storage: -1,
        streams: -1,
        consumer: -1,
        subs: -1,
        data: -1,
        payload: -1,
        conn: -1,
        imports: -1,
        exports: -1,
        wildcards: true,
        leaf: -1,
      },
    },
    { signer: op },
  );
  return {
    operator: { seed: text(op.getSeed()), jwt: operatorJwt },
    system: { seed: text(sys.getSeed()), jwt: systemJwt, publicKey: sys.getPublicKey() },
    account: { seed: text(acc.getSeed()), jwt: accountJwt, publicKey: acc.getPublicKey() },
    signingSeed: text(signing.getSeed()),
  };
}

/** The signer of the accounts' evalfleet account. */
export function signerOf(a: NatsAccounts): AccountSigner {
  return { account: a.account.publicKey, signingSeed: a.signingSeed };
}

/**
 * The server config lines for operator mode (nats-server 2.9): the operator, the system account and a memory
 * resolver preloaded with both accounts. Nothing else authenticates, so anonymous connections are refused.
 */
export function operatorModeConfig(a: NatsAccounts): string {
  return [
    `operator: ${a.operator.jwt}`,
    `system_account: ${a.system.publicKey}`,
    "resolver: MEMORY",
    "resolver_preload: {",
    `  ${a.system.publicKey}: ${a.system.jwt}`,
    `  ${a.account.publicKey}: ${a.account.jwt}`,
    "}",
  ].join("\n");
}

/**
 * A user of the evalfleet account with every permission in it, as a `.creds` text: what the plane's own processes
 * (actors, gateway, CLI, tests) connect with. `expiresAt` (ms since the epoch) makes it expire.
 */
export async function planeUserCreds(
  signer: AccountSigner,
  name = "plane",
  expiresAt?: number,
): Promise<string> {
  return (await planeUser(signer, name, expiresAt)).creds;
}

/** The plane user as its JWT and nkey seed (NATS_JWT + NATS_NKEY_SEED, how ECS hands it over) and `.creds`. */
export async function planeUser(
  signer: AccountSigner,
  name = "plane",
  expiresAt?: number,
): Promise<{ jwt: string; seed: string; creds: string }> {
  const user = createUser();
  const jwt = await encodeUser(
    name,
    user,
    signer.account,
    {},
    {
      signer: fromSeed(new TextEncoder().encode(signer.signingSeed)),
      algorithm: Algorithms.v2,
      ...(expiresAt === undefined ? {} : { exp: Math.floor(expiresAt / 1000) }),
    },
  );
  return { jwt, seed: text(user.getSeed()), creds: text(fmtCreds(jwt, user)) };
}

/** One attempt's NATS credential: a user JWT and its nkey seed, and the inbox prefix it must connect with. */
export interface AttemptCredential {
  jwt: string;
  seed: string;
  /** the `.creds` text of the two */
  creds: string;
  inboxPrefix: string;
  /** when the server stops accepting it (ms since the epoch) */
  expiresAt: number;
}

/** Mint the NATS user of one attempt, allowed `attemptPermissions` only, expiring at `expiresAt` (ms). */
export async function mintAttemptUser(
  signer: AccountSigner,
  id: AttemptIdentity,
  expiresAt: number,
): Promise<AttemptCredential> {
  const user = createUser();
  const perms = attemptPermissions(id);
  const jwt = await encodeUser(
    `attempt.${Subjects.attempts.one(id.run, id.cell, id.attempt).slice("attempts.".length)}`,
    user,
    signer.account,
    { pub: { allow: perms.publish }, sub: { allow: perms.subscribe } },
    {
      signer: fromSeed(new TextEncoder().encode(signer.signingSeed)),
      algorithm: Algorithms.v2,
      exp: Math.floor(expiresAt / 1000),
    },
  );
  return {
    jwt,
    seed: text(user.getSeed()),
    creds: text(fmtCreds(jwt, user)),
    inboxPrefix: ApiSubjects.attemptInbox(id.run, id.cell, id.attempt),
    expiresAt,
  };
}

/** The blobs a task stores for its attempt (task/run.ts `store`). */
export const ATTEMPT_BLOB_FILES = ["patch.diff", "trajectory.jsonl", "stdout.txt", "stderr.txt"] as const;

/**
 * What one attempt's task may do on NATS, and nothing more (everything else is denied by omission):
 *
 * - read its own job by KV direct get (its cell's work, its run's config, its task's spec, its gateway key) —
 *   never the message-get API, whose key is in the body where a permission cannot see it;
 * - write its own progress key (the shim's coalesced progress);
 * - publish its own ledger rows, attempt result and attempt signal (the shim's cap signal);
 * - store its own blobs: the metadata subjects of exactly its own blob names and chunks under its own chunk prefix
 *   (task/blobs.ts writes them so; @nats-io/obj's own `put` would read the store through the message-get API);
 * - hear its own attempt signal, and replies on its own inbox prefix (so it can never read another client's).
 */
export function attemptPermissions(id: AttemptIdentity): { publish: string[]; subscribe: string[] } {
  const { run, cell, attempt } = id;
  const jobs = Buckets.jobs.name;
  const blobs = ObjectStores.blobs.name;
  return {
    publish: [
      ApiSubjects.kvDirectGet(jobs, StateKeys.job(run, cell)),
      ApiSubjects.kvDirectGet(jobs, StateKeys.jobRun(run)),
      ApiSubjects.kvDirectGet(jobs, StateKeys.jobTask(run, id.task)),
      ApiSubjects.kvDirectGet(jobs, StateKeys.attemptKey(run, cell, attempt)),
      ApiSubjects.kvKey(Buckets.progress.name, ProgressKeys.cell(run, cell)),
      Subjects.ledger.one(run, cell, attempt),
      Subjects.attempts.one(run, cell, attempt),
      Subjects.attemptSignal(run, cell, attempt),
      ...ATTEMPT_BLOB_FILES.map((f) =>
        ApiSubjects.objectMeta(blobs, BlobNames.attempt(run, cell, attempt, f)),
      ),
      ApiSubjects.objectChunks(blobs, ApiSubjects.attemptChunkId(run, cell, attempt, "*")),
    ],
    subscribe: [
      `${ApiSubjects.attemptInbox(run, cell, attempt)}.>`,
      Subjects.attemptSignal(run, cell, attempt),
    ],
  };
}

/**
 * What a deployment's NATS secrets hold (deploy/lib/nats-auth.ts), made from one set of accounts: the servers'
 * operator-mode lines (no seed in them), the plane user, and the account's signing key for the dispatcher.
 */
export interface DeployedNatsSecrets {
  serverAuth: string;
  plane: { jwt: string; seed: string };
  signer: { account: string; signingKey: string };
}

/** The values of a deployment's NATS secrets (the plane user without expiry: it is rotated with the accounts). */
export async function deployedNatsSecrets(accounts: NatsAccounts): Promise<DeployedNatsSecrets> {
  const signer = signerOf(accounts);
  const plane = await planeUser(signer, "plane");
  return {
    serverAuth: operatorModeConfig(accounts),
    plane: { jwt: plane.jwt, seed: plane.seed },
    signer: { account: signer.account, signingKey: signer.signingSeed },
  };
}
