/**
 * Per-attempt NATS users (plane/nats-auth.ts) on a real nats-server in operator mode, the scheme `evalfleet up`, the
 * tests and the deployed cluster run: nobody connects anonymously; an attempt's user, minted as the dispatcher mints
 * it, does exactly its own attempt's things through the same code the task runs (openPlane scoped to the attempt,
 * the job fetch, blobs, ledger, result, signal) and nothing else; an expired one is refused. Every refusal is the
 * server's permission violation for exactly that operation and subject, so a check passes only for the reason it
 * names.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { jetstream } from "@nats-io/jetstream";
import { createAccount, createUser } from "@nats-io/nkeys";
import {
  AuthorizationError,
  connect,
  jwtAuthenticator,
  type NatsConnection,
  PermissionViolationError,
} from "@nats-io/transport-node";
import { attemptChunkId, putOwnBlob } from "../../plane/blobs.js";
import { openPlane, type Plane } from "../../plane/connect.js";
import {
  type AttemptCredential,
  type AttemptIdentity,
  mintAttemptUser,
  planeUserCreds,
} from "../../plane/nats-auth.js";
import { type CellWork, MessageTypes } from "../../protocol/messages.js";
import { ApiSubjects, BlobNames, ProgressKeys, StateKeys, Subjects } from "../../protocol/subjects.js";
import { Buckets, ObjectStores, Streams } from "../../protocol/topology.js";
import { fetchAttemptKey, fetchJob } from "../../task/job.js";
import { startNats, type TestNats } from "../helpers/nats.js";

/** This attempt, its next attempt, a sibling cell of the run, and a cell of another run. */
const me: AttemptIdentity = { run: "run:1", cell: "h__m__calc-add__r0", attempt: 2, task: "calc-add" };
const nextAttempt: AttemptIdentity = { ...me, attempt: 3 };
const sibling: AttemptIdentity = { ...me, cell: "h__m__ranges-sum__r0", task: "ranges-sum" };
const otherRun: AttemptIdentity = { ...me, run: "run:2" };
const everyone = [me, nextAttempt, sibling, otherRun];

let nats: TestNats;
let actors: Plane;
const creds = new Map<AttemptIdentity, AttemptCredential>();
const opened: Array<{ close(): Promise<unknown> }> = [];
const HOUR = 3_600_000;

const blobs = ObjectStores.blobs.name;
const jobs = Buckets.jobs.name;

const work = (t: AttemptIdentity) =>
  JSON.stringify({
    type: MessageTypes.cellWork,
    run: t.run,
    cellId: t.cell,
    pool: "h__m",
    harness: "h",
    model: "m",
    reviewModel: null,
    taskId: t.task,
    track: "swe",
    repeat: 0,
    traceId: "t",
    exempt: false,
    costMode: "platform",
  } satisfies CellWork);

/** A raw connection as one attempt's user, on its own inbox prefix (or another). */
async function connectAs(t: AttemptIdentity, inboxPrefix?: string): Promise<NatsConnection> {
  const c = creds.get(t);
  assert.ok(c, "an attempt user exists for this identity");
  const nc = await connect({
    ...nats.connectOptions,
    authenticator: jwtAuthenticator(c.jwt, new TextEncoder().encode(c.seed)),
    inboxPrefix: inboxPrefix ?? c.inboxPrefix,
    maxReconnectAttempts: 0,
  });
  opened.push(nc);
  return nc;
}

/** The plane a task opens as its attempt's user (cli/commands/task.ts). */
async function taskPlane(t: AttemptIdentity): Promise<Plane> {
  const c = creds.get(t)!;
  const p = await openPlane({
    name: "task",
    nats: { servers: nats.servers, configured: true, auth: { kind: "jwt", jwt: c.jwt, seed: c.seed } },
    ensure: false,
    attempt: t,
  });
  opened.push(p);
  return p;
}

/**
 * Run `action` and wait for the server to report a permission violation for `operation` on `subject` to this
 * connection. Fails when it does not come (the action was allowed) or comes for anything else.
 */
async function assertDenied(
  nc: NatsConnection,
  operation: "publish" | "subscription",
  subject: string | RegExp,
  action: () => Promise<unknown> | unknown,
): Promise<void> {
  const statuses = nc.status() as AsyncIterable<{ type: string; error?: unknown }> & { stop(): void };
  const timer = setTimeout(() => statuses.stop(), 3_000);
  const seen = (async () => {
    for await (const s of statuses) {
      if (s.type === "error" && s.error instanceof PermissionViolationError) return s.error;
    }
    return undefined;
  })();
  let rejected: unknown;
  try {
    await action();
  } catch (err) {
    rejected = err;
  }
  const v = await seen;
  clearTimeout(timer);
  statuses.stop();
  assert.ok(
    v,
    `no permission violation for ${operation} ${subject} (the action ${rejected ? `failed: ${String(rejected)}` : "succeeded"})`,
  );
  assert.equal(v.operation, operation, v.message);
  if (typeof subject === "string") assert.equal(v.subject, subject, v.message);
  else assert.match(v.subject, subject, v.message);
}

const deniedRequest = (nc: NatsConnection, subject: string, body = "") =>
  assertDenied(nc, "publish", subject, () => nc.request(subject, body, { timeout: 2_000 }));
const deniedPublish = (nc: NatsConnection, subject: string) =>
  assertDenied(nc, "publish", subject, async () => {
    nc.publish(subject, "x");
    await nc.flush();
  });
const deniedSubscribe = (nc: NatsConnection, subject: string) =>
  assertDenied(nc, "subscription", subject, async () => {
    nc.subscribe(subject, { callback: () => {} });
    await nc.flush();
  });

before(async () => {
  nats = await startNats();
  actors = await openPlane({ nats: nats.settings, name: "actors" });
  for (const t of everyone) creds.set(t, await mintAttemptUser(nats.signer, t, Date.now() + HOUR));
  // What the planner and dispatcher leave for the run's tasks, for this run and another.
  for (const t of everyone) {
    await actors.kv.jobs.put(StateKeys.job(t.run, t.cell), work(t));
    await actors.kv.jobs.put(
      StateKeys.jobTask(t.run, t.task),
      JSON.stringify({ id: t.task, track: "swe", repo: "r", base_commit: "abc" }),
    );
    await actors.kv.jobs.put(StateKeys.attemptKey(t.run, t.cell, t.attempt), `key of ${t.cell}/${t.attempt}`);
    await actors.kv.budgets.put(StateKeys.budget(t.run), "{}");
    await actors.kv.progress.put(ProgressKeys.cell(t.run, t.cell), "{}");
  }
  await actors.blobs.putBlob(
    { name: BlobNames.attempt(sibling.run, sibling.cell, sibling.attempt, "patch.diff") },
    new TextEncoder().encode("the sibling's patch"),
  );
});

after(async () => {
  for (const c of opened) await c.close().catch(() => {});
  await actors?.close();
  await nats?.cleanup();
});

describe("NATS: nobody connects without a credential the account signed", { timeout: 60_000 }, () => {
  it("refuses an anonymous connection, a user signed by a stranger, and an expired attempt user", async () => {
    await assert.rejects(
      connect({ servers: nats.url, maxReconnectAttempts: 0 }), // codemod: keep (its own credential, or none)
      (e: unknown) => e instanceof AuthorizationError,
    );
    const stranger = await planeUserCreds({
      account: createAccount().getPublicKey(),
      signingSeed: new TextDecoder().decode(createAccount().getSeed()),
    });
    await assert.rejects(
      connect({
        servers: nats.url, // codemod: keep (its own credential, or none)
        authenticator: (await import("@nats-io/transport-node")).credsAuthenticator(
          new TextEncoder().encode(stranger),
        ),
        maxReconnectAttempts: 0,
      }),
      (e: unknown) => e instanceof AuthorizationError,
    );
    const expired = await mintAttemptUser(nats.signer, me, Date.now() - 60_000);
    await assert.rejects(
      connect({
        servers: nats.url, // codemod: keep (its own credential, or none)
        authenticator: jwtAuthenticator(expired.jwt, new TextEncoder().encode(expired.seed)),
        maxReconnectAttempts: 0,
      }),
      (e: unknown) => e instanceof Error && /expired|authorization/i.test(e.message),
    );
    // A user's seed without its JWT is nobody.
    await assert.rejects(
      connect({
        servers: nats.url, // codemod: keep (its own credential, or none)
        authenticator: jwtAuthenticator(creds.get(me)!.jwt, createUser().getSeed()),
        maxReconnectAttempts: 0,
      }),
      (e: unknown) => e instanceof AuthorizationError,
    );
  });

  it("disconnects an attempt user when its credential expires", async () => {
    // A few seconds of life; a machine too slow to connect within them gets a longer one (JWT expiry is in seconds).
    let nc: NatsConnection | undefined;
    let short: Awaited<ReturnType<typeof mintAttemptUser>> | undefined;
    for (const lifeMs of [3_000, 10_000, 30_000]) {
      short = await mintAttemptUser(nats.signer, me, Date.now() + lifeMs);
      nc = await connect({
        servers: nats.url, // codemod: keep (its own credential, or none)
        authenticator: jwtAuthenticator(short.jwt, new TextEncoder().encode(short.seed)),
        inboxPrefix: short.inboxPrefix,
        maxReconnectAttempts: 0,
      }).catch(() => undefined);
      if (nc) break;
    }
    assert.ok(nc && short, "connected while the credential was valid");
    // The server ends the connection at expiry (the client sees the server's error, or the socket closing first).
    const err = await nc.closed();
    const closedAt = Date.now();
    assert.ok(err instanceof Error, `the server closed the connection: ${String(err)}`);
    assert.ok(
      closedAt >= short.expiresAt - 1_000,
      `closed ${short.expiresAt - closedAt} ms before expiry: ${String(err)}`,
    );
    // And the expired credential gets nothing more: a new connection with it is refused for that reason. (JWT
    // expiry is in whole seconds and the server compares it with its clock: ask once that second is over.)
    const pastExpiry = Math.floor(short.expiresAt / 1000) * 1000 + 1_100 - Date.now();
    if (pastExpiry > 0) await new Promise((r) => setTimeout(r, pastExpiry));
    const again = await connect({
      servers: nats.url, // codemod: keep (its own credential, or none)
      authenticator: jwtAuthenticator(short.jwt, new TextEncoder().encode(short.seed)),
      maxReconnectAttempts: 0,
    }).then(
      async (c) => {
        await c.close();
        return null;
      },
      (e: unknown) => e,
    );
    assert.ok(again instanceof Error && /expired|authorization/i.test(again.message), String(again));
  });
});

describe("NATS: an attempt's user does its own attempt's things", { timeout: 60_000 }, () => {
  it("fetches its job and key, writes its progress, ledger, result, blobs and signal, as the task does", async () => {
    const p = await taskPlane(me);
    const job = await fetchJob(p.kv.jobs, { run: me.run, cell: me.cell, attempt: me.attempt }).catch(
      (e: unknown) => e,
    );
    // The job's run config is missing here: the fetch got the cell and failed on the run, which it could read.
    assert.ok(job instanceof Error && /the run/.test(job.message), String(job));
    assert.equal(
      await fetchAttemptKey(p.kv.jobs, me.run, me.cell, me.attempt),
      `key of ${me.cell}/${me.attempt}`,
    );
    assert.ok((await p.kv.progress.put(ProgressKeys.cell(me.run, me.cell), '{"calls":1}')) > 0);
    assert.ok((await p.js.publish(Subjects.ledger.one(me.run, me.cell, me.attempt), "{}")).seq > 0);
    assert.ok((await p.js.publish(Subjects.attempts.one(me.run, me.cell, me.attempt), "{}")).seq > 0);
    const body = new Uint8Array(300_000).map((_, i) => i % 251);
    const name = BlobNames.attempt(me.run, me.cell, me.attempt, "patch.diff");
    await putOwnBlob(p.js, name, attemptChunkId(me.run, me.cell, me.attempt), body);
    // The actors read what it wrote, through the ordinary object store.
    assert.deepEqual(await actors.blobs.getBlob(name), body);
    assert.equal((await actors.kv.progress.get(ProgressKeys.cell(me.run, me.cell)))?.string(), '{"calls":1}');
    const ledger = await actors.jsm.streams.info(Streams.ledger.name, { subjects_filter: ">" });
    assert.deepEqual(ledger.state.subjects, { [Subjects.ledger.one(me.run, me.cell, me.attempt)]: 1 });
    // Its own attempt signal: it hears the dispatcher's and may send the shim's.
    const heard = new Promise<string>((resolve) =>
      p.nc.subscribe(Subjects.attemptSignal(me.run, me.cell, me.attempt), {
        callback: (_e, m) => resolve(m.string()),
      }),
    );
    await p.nc.flush();
    p.nc.publish(Subjects.attemptSignal(me.run, me.cell, me.attempt), '{"reason":"budget_exceeded"}');
    assert.equal(await heard, '{"reason":"budget_exceeded"}');
  });
});

describe("NATS: an attempt's user does nothing else", { timeout: 120_000 }, () => {
  it("cannot read another attempt's, cell's or run's keys, a run key, budgets, control or any key by message get", async () => {
    const nc = await connectAs(me);
    for (const subject of [
      ApiSubjects.kvDirectGet(
        jobs,
        StateKeys.attemptKey(nextAttempt.run, nextAttempt.cell, nextAttempt.attempt),
      ),
      ApiSubjects.kvDirectGet(jobs, StateKeys.attemptKey(sibling.run, sibling.cell, sibling.attempt)),
      ApiSubjects.kvDirectGet(jobs, StateKeys.job(sibling.run, sibling.cell)),
      ApiSubjects.kvDirectGet(jobs, StateKeys.jobTask(sibling.run, sibling.task)),
      ApiSubjects.kvDirectGet(jobs, StateKeys.job(otherRun.run, otherRun.cell)),
      ApiSubjects.kvDirectGet(jobs, StateKeys.jobRun(otherRun.run)),
      // a run-wide key there is none of any more: `key.<run>` (as earlier builds wrote it) is not its to read
      ApiSubjects.kvDirectGet(jobs, `key.${me.run.replace(":", "=3A")}`),
      ApiSubjects.kvDirectGet(Buckets.progress.name, ProgressKeys.cell(sibling.run, sibling.cell)),
      ApiSubjects.kvDirectGet(Buckets.progress.name, ProgressKeys.run(me.run)),
      ApiSubjects.kvDirectGet(Buckets.budgets.name, StateKeys.budget(me.run)),
      ApiSubjects.kvDirectGet(Buckets.control.name, StateKeys.control(me.run)),
      ApiSubjects.kvMsgGet(jobs),
      `$JS.API.STREAM.MSG.GET.OBJ_${blobs}`,
      `$JS.API.DIRECT.GET.OBJ_${blobs}`,
      `$JS.API.DIRECT.GET.OBJ_${blobs}.${ApiSubjects.objectMeta(blobs, BlobNames.attempt(sibling.run, sibling.cell, sibling.attempt, "patch.diff"))}`,
    ])
      await deniedRequest(nc, subject);
  });

  it("cannot publish another attempt's, cell's or run's results, ledger, progress, signal or blobs", async () => {
    const nc = await connectAs(me);
    for (const t of [nextAttempt, sibling, otherRun])
      for (const subject of [
        Subjects.ledger.one(t.run, t.cell, t.attempt),
        Subjects.attempts.one(t.run, t.cell, t.attempt),
        Subjects.attemptSignal(t.run, t.cell, t.attempt),
        ApiSubjects.objectMeta(blobs, BlobNames.attempt(t.run, t.cell, t.attempt, "patch.diff")),
        ApiSubjects.objectChunks(blobs, attemptChunkId(t.run, t.cell, t.attempt)),
      ])
        await deniedPublish(nc, subject);
    for (const subject of [
      ApiSubjects.kvKey(Buckets.progress.name, ProgressKeys.cell(sibling.run, sibling.cell)),
      ApiSubjects.kvKey(Buckets.progress.name, ProgressKeys.run(me.run)),
      ApiSubjects.kvKey(jobs, StateKeys.job(me.run, me.cell)),
      ApiSubjects.kvKey(jobs, StateKeys.attemptKey(me.run, me.cell, me.attempt)),
      ApiSubjects.kvKey(Buckets.budgets.name, StateKeys.claim(me.run, me.cell, me.attempt)),
      ApiSubjects.kvKey(Buckets.control.name, StateKeys.control(me.run)),
      ApiSubjects.objectMeta(blobs, `${BlobNames.attemptPrefix(me.run, me.cell, me.attempt)}other.txt`),
      ApiSubjects.objectChunks(blobs, "AAAAAAAAAAAAAAAAAAAAAA"),
      Subjects.runSubmit,
      Subjects.cells.one(me.run, "h__m"),
      Subjects.gradeJobs.one(me.run),
      Subjects.gradeResults.one(me.run),
      Subjects.judgeJobs.one(me.run),
      Subjects.events.run(me.run),
      Subjects.control.one(me.run, "cancel"),
    ])
      await deniedPublish(nc, subject);
    const attempts = await actors.jsm.streams.info(Streams.attempts.name, { subjects_filter: ">" });
    for (const t of [nextAttempt, sibling, otherRun])
      assert.equal(attempts.state.subjects?.[Subjects.attempts.one(t.run, t.cell, t.attempt)], undefined);
    assert.equal(
      await actors.blobs.info(BlobNames.attempt(otherRun.run, otherRun.cell, otherRun.attempt, "patch.diff")),
      null,
    );
  });

  it("cannot use the JetStream API, nor hear others' subjects, inboxes or signals", async () => {
    const nc = await connectAs(me);
    for (const subject of [
      "$JS.API.INFO",
      "$JS.API.STREAM.NAMES",
      `$JS.API.STREAM.INFO.${Streams.ledger.name}`,
      `$JS.API.STREAM.INFO.KV_${jobs}`,
      `$JS.API.STREAM.INFO.OBJ_${blobs}`,
      `$JS.API.STREAM.DELETE.${Streams.ledger.name}`,
      `$JS.API.STREAM.PURGE.OBJ_${blobs}`,
      `$JS.API.CONSUMER.CREATE.${Streams.attempts.name}`,
      `$JS.API.CONSUMER.MSG.NEXT.${Streams.cells.name}.dispatcher`,
    ])
      await deniedRequest(nc, subject, "{}");
    for (const subject of [
      ">",
      "ledger.>",
      Subjects.ledger.one(me.run, me.cell, me.attempt),
      Subjects.attempts.all,
      Subjects.events.all,
      `$KV.${jobs}.>`,
      `$KV.${Buckets.budgets.name}.>`,
      `$O.${blobs}.>`,
      "$JS.API.>",
      "_INBOX.>",
      `${creds.get(sibling)!.inboxPrefix}.>`,
      `${creds.get(nextAttempt)!.inboxPrefix}.>`,
      Subjects.attemptSignal(sibling.run, sibling.cell, sibling.attempt),
      "signal.>",
    ])
      await deniedSubscribe(nc, subject);
  });

  it("gets no reply on the shared _INBOX prefix: only its own prefix works", async () => {
    const nc = await connectAs(me, "_INBOX");
    await assertDenied(nc, "subscription", /^_INBOX\.[A-Za-z0-9]+\.\*$/, () =>
      nc.request(ApiSubjects.kvDirectGet(jobs, StateKeys.job(me.run, me.cell)), "", { timeout: 2_000 }),
    );
  });

  it("another attempt's user is bound the same way: the sibling reads its own job, not this one's", async () => {
    const p = await taskPlane(sibling);
    assert.equal(
      await fetchAttemptKey(p.kv.jobs, sibling.run, sibling.cell, sibling.attempt),
      `key of ${sibling.cell}/${sibling.attempt}`,
    );
    await deniedRequest(
      p.nc,
      ApiSubjects.kvDirectGet(jobs, StateKeys.attemptKey(me.run, me.cell, me.attempt)),
    );
    await deniedRequest(p.nc, ApiSubjects.kvDirectGet(jobs, StateKeys.job(me.run, me.cell)));
    const js = jetstream(p.nc, { timeout: 5_000 });
    await assertDenied(p.nc, "publish", Subjects.attempts.one(me.run, me.cell, me.attempt), () =>
      js.publish(Subjects.attempts.one(me.run, me.cell, me.attempt), "{}"),
    );
  });
});
