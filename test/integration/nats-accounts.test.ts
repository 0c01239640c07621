/**
 * The deploy's per-role NATS accounts (deploy/lib/nats-auth.ts) on a real nats-server: a harness task's credential
 * (its nkey user in TASKS) reaches its own attempt's subjects and nothing else. Every refusal is the server's
 * permission violation for exactly that operation and subject, so a check passes only for the reason it names.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { jetstream } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { createUser, type KeyPair } from "@nats-io/nkeys";
import {
  AuthorizationError,
  connect,
  type NatsConnection,
  nkeyAuthenticator,
  PermissionViolationError,
} from "@nats-io/transport-node";
import { openPlane, type Plane } from "../../actors/runtime/connect.js";
import {
  natsAuthorization,
  renderNatsConf,
  type TaskIdentity,
  taskInboxPrefix,
} from "../../deploy/lib/nats-auth.js";
import { ProgressKeys, StateKeys, Subjects } from "../../protocol/subjects.js";
import { Buckets, Streams } from "../../protocol/topology.js";
import { startNats, type TestNats } from "../helpers/nats.js";

/** This attempt, its next attempt, a sibling cell of the run, and a cell of another run. */
const me: TaskIdentity = {
  run: "run:1",
  cell: "h__m__astropy__astropy-12907__r0",
  attempt: 2,
  pool: "h__m",
  task: "astropy__astropy-12907",
};
const nextAttempt: TaskIdentity = { ...me, attempt: 3 };
const sibling: TaskIdentity = { ...me, cell: "h__m__django__django-11099__r0", task: "django__django-11099" };
const otherRun: TaskIdentity = { ...me, run: "run:2" };

const ACTORS_PW = "actors-pw-for-this-test";
const PW_ENV = "EF_TEST_NATS_ACTORS_PW";

let nats: TestNats;
let actors: Plane;
const keys = new Map<TaskIdentity, KeyPair>();
const opened: NatsConnection[] = [];

/**
 * A task reads KV by direct get, whose subject names the key (so a permission can name it); the plain message-get
 * API carries the key in its body, so it is denied.
 */
const DIRECT = { allow_direct: true } as const;

const kvSubject = (bucket: string, key: string) => `$KV.${bucket}.${key}`;
const directGet = (bucket: string, key: string) =>
  `$JS.API.DIRECT.GET.KV_${bucket}.${kvSubject(bucket, key)}`;

/** A connection as one task: its nkey, and the inbox prefix its replies come back on. */
async function connectAs(t: TaskIdentity, inboxPrefix = taskInboxPrefix(t)): Promise<NatsConnection> {
  const kp = keys.get(t);
  assert.ok(kp, "a task user exists for this identity");
  const nc = await connect({
    servers: nats.url,
    authenticator: nkeyAuthenticator(kp.getSeed()),
    inboxPrefix,
    maxReconnectAttempts: 0,
  });
  opened.push(nc);
  return nc;
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
  if (rejected !== undefined) {
    const pe = rejected instanceof PermissionViolationError ? rejected : (rejected as Error).cause;
    assert.ok(pe instanceof PermissionViolationError, `rejected for another reason: ${String(rejected)}`);
  }
}

/** A request the task may not make: refused by the server, the caller gets the violation. */
function deniedRequest(nc: NatsConnection, subject: string, body = ""): Promise<void> {
  return assertDenied(nc, "publish", subject, () => nc.request(subject, body, { timeout: 2_000 }));
}

/** A publish the task may not make. */
function deniedPublish(nc: NatsConnection, subject: string): Promise<void> {
  return assertDenied(nc, "publish", subject, async () => {
    nc.publish(subject, "x");
    await nc.flush();
  });
}

/** A subscription the task may not hold. */
function deniedSubscribe(nc: NatsConnection, subject: string): Promise<void> {
  return assertDenied(nc, "subscription", subject, async () => {
    nc.subscribe(subject, { callback: () => {} });
    await nc.flush();
  });
}

before(async () => {
  for (const t of [me, nextAttempt, sibling, otherRun]) keys.set(t, createUser());
  const auth = natsAuthorization({
    actors: [{ user: "actor", password: { env: PW_ENV } }],
    gateway: [{ user: "gateway", password: { env: "EF_TEST_NATS_GATEWAY_PW" } }],
    tasks: [...keys].map(([task, kp]) => ({ task, nkey: kp.getPublicKey() })),
  });
  // The rendered config names the passwords as $VARs; nats-server resolves them from its environment.
  process.env[PW_ENV] = ACTORS_PW;
  process.env.EF_TEST_NATS_GATEWAY_PW = "gateway-pw-for-this-test";
  nats = await startNats({ extraConfig: renderNatsConf(auth) });
  actors = await openPlane({ servers: nats.url, name: "actors", auth: { user: "actor", pass: ACTORS_PW } });
  // What the planner and dispatcher leave for the run's tasks, for this run and another.
  for (const t of [me, sibling, otherRun]) {
    await actors.kv.jobs.put(StateKeys.job(t.run, t.cell), `job of ${t.cell} in ${t.run}`);
    await actors.kv.jobs.put(StateKeys.jobTask(t.run, t.task), `spec of ${t.task} in ${t.run}`);
    await actors.kv.jobs.put(StateKeys.jobRun(t.run), `config of ${t.run}`);
    await actors.kv.jobs.put(StateKeys.runKey(t.run), `key of ${t.run}`);
    await actors.kv.budgets.put(StateKeys.budget(t.run), "{}");
    await actors.kv.progress.put(ProgressKeys.cell(t.run, t.cell), "{}");
  }
  await actors.kv.pacer.put(StateKeys.pacerPool(me.pool), "{}");
  await actors.kv.pacer.put(StateKeys.pacerPool("other__pool"), "{}");
});

after(async () => {
  for (const nc of opened) await nc.close().catch(() => {});
  await actors?.close();
  await nats?.cleanup();
  delete process.env[PW_ENV];
  delete process.env.EF_TEST_NATS_GATEWAY_PW;
});

describe("NATS per-role accounts: a harness task's credential", { timeout: 60_000 }, () => {
  it("connects only with its nkey, and only with its own inbox prefix can it get replies", async () => {
    await assert.rejects(
      connect({ servers: nats.url, maxReconnectAttempts: 0 }),
      (e: unknown) => e instanceof AuthorizationError,
    );
    const stranger = createUser();
    await assert.rejects(
      connect({
        servers: nats.url,
        authenticator: nkeyAuthenticator(stranger.getSeed()),
        maxReconnectAttempts: 0,
      }),
      (e: unknown) => e instanceof AuthorizationError,
    );
    // With the shared _INBOX prefix its reply subscription is refused, so no request of it can work.
    const nc = await connectAs(me, "_INBOX");
    await assertDenied(nc, "subscription", /^_INBOX\.[A-Za-z0-9]+\.\*$/, () =>
      nc.request(directGet(Buckets.jobs.name, StateKeys.job(me.run, me.cell)), "", { timeout: 2_000 }),
    );
  });

  it("publishes its own ledger entries, attempt result and progress key, and reads its own job", async () => {
    const nc = await connectAs(me);
    const js = jetstream(nc, { timeout: 5_000 });
    assert.ok((await js.publish(Subjects.ledger.one(me.run, me.cell), "{}")).seq > 0);
    assert.ok((await js.publish(Subjects.attempts.one(me.run, me.cell), "{}")).seq > 0);
    // Through the KV client, as the shim writes its cell's progress and the task fetches its job.
    const kvm = new Kvm(js);
    const progress = await kvm.open(Buckets.progress.name);
    assert.ok((await progress.put(ProgressKeys.cell(me.run, me.cell), '{"calls":1}')) > 0);
    const jobs = await kvm.open(Buckets.jobs.name, DIRECT);
    assert.equal(
      (await jobs.get(StateKeys.job(me.run, me.cell)))?.string(),
      `job of ${me.cell} in ${me.run}`,
    );
    assert.equal((await jobs.get(StateKeys.jobRun(me.run)))?.string(), `config of ${me.run}`);
    assert.equal(
      (await jobs.get(StateKeys.jobTask(me.run, me.task)))?.string(),
      `spec of ${me.task} in ${me.run}`,
    );
    assert.equal((await jobs.get(StateKeys.runKey(me.run)))?.string(), `key of ${me.run}`);
    const pacer = await kvm.open(Buckets.pacer.name, DIRECT);
    assert.equal((await pacer.get(StateKeys.pacerPool(me.pool)))?.string(), "{}");
    // The actors see what it wrote.
    assert.equal((await actors.kv.progress.get(ProgressKeys.cell(me.run, me.cell)))?.string(), '{"calls":1}');
    const ledger = await actors.jsm.streams.info(Streams.ledger.name, { subjects_filter: ">" });
    assert.deepEqual(ledger.state.subjects, { [Subjects.ledger.one(me.run, me.cell)]: 1 });
  });

  it("hears its own attempt's signal, and only its own", async () => {
    const nc = await connectAs(me);
    const heard = new Promise<string>((resolve) =>
      nc.subscribe(Subjects.attemptSignal(me.run, me.cell, me.attempt), {
        callback: (_e, m) => resolve(m.string()),
      }),
    );
    await nc.flush();
    actors.nc.publish(Subjects.attemptSignal(me.run, me.cell, me.attempt), '{"reason":"cancel"}');
    assert.equal(await heard, '{"reason":"cancel"}');
    for (const subject of [
      Subjects.attemptSignal(nextAttempt.run, nextAttempt.cell, nextAttempt.attempt),
      Subjects.attemptSignal(sibling.run, sibling.cell, sibling.attempt),
      Subjects.attemptSignal(otherRun.run, otherRun.cell, otherRun.attempt),
      "signal.>",
      `signal.${Subjects.attemptSignal(me.run, me.cell, me.attempt).split(".")[1]}.>`,
    ])
      await deniedSubscribe(nc, subject);
  });

  it("cannot publish another cell's, attempt's or run's entries, nor anything an actor publishes", async () => {
    const nc = await connectAs(me);
    for (const subject of [
      Subjects.ledger.one(sibling.run, sibling.cell),
      Subjects.ledger.one(otherRun.run, otherRun.cell),
      Subjects.attempts.one(sibling.run, sibling.cell),
      Subjects.attempts.one(otherRun.run, otherRun.cell),
      kvSubject(Buckets.progress.name, ProgressKeys.cell(sibling.run, sibling.cell)),
      kvSubject(Buckets.progress.name, ProgressKeys.cell(otherRun.run, otherRun.cell)),
      kvSubject(Buckets.progress.name, ProgressKeys.run(me.run)),
      Subjects.attemptSignal(nextAttempt.run, nextAttempt.cell, nextAttempt.attempt),
      Subjects.runSubmit,
      Subjects.cells.one(me.run, me.pool),
      Subjects.gradeJobs.one(me.run),
      Subjects.gradeResults.one(me.run),
      Subjects.judgeJobs.one(me.run),
      Subjects.events.run(me.run),
      Subjects.control.one(me.run, "cancel"),
    ])
      await deniedPublish(nc, subject);
    // Nothing of it landed.
    const ledger = await actors.jsm.streams.info(Streams.ledger.name, { subjects_filter: ">" });
    assert.equal(ledger.state.subjects?.[Subjects.ledger.one(sibling.run, sibling.cell)], undefined);
    const attempts = await actors.jsm.streams.info(Streams.attempts.name, { subjects_filter: ">" });
    assert.equal(attempts.state.subjects?.[Subjects.attempts.one(otherRun.run, otherRun.cell)], undefined);
  });

  it("cannot write the jobs, budgets, control or another pool's pacer entries", async () => {
    const nc = await connectAs(me);
    for (const subject of [
      kvSubject(Buckets.jobs.name, StateKeys.job(me.run, me.cell)),
      kvSubject(Buckets.jobs.name, StateKeys.runKey(me.run)),
      kvSubject(Buckets.budgets.name, StateKeys.budget(me.run)),
      kvSubject(Buckets.budgets.name, StateKeys.claim(me.run, me.cell, me.attempt)),
      kvSubject(Buckets.budgets.name, StateKeys.cellLaunch(me.run, me.cell)),
      kvSubject(Buckets.control.name, StateKeys.control(me.run)),
      kvSubject(Buckets.pacer.name, StateKeys.pacerPool("other__pool")),
    ])
      await deniedPublish(nc, subject);
    assert.equal((await actors.kv.budgets.get(StateKeys.budget(me.run)))?.string(), "{}");
  });

  it("cannot read another cell's or another run's KV keys, nor budgets or control", async () => {
    const nc = await connectAs(me);
    for (const subject of [
      directGet(Buckets.jobs.name, StateKeys.job(sibling.run, sibling.cell)),
      directGet(Buckets.jobs.name, StateKeys.jobTask(sibling.run, sibling.task)),
      directGet(Buckets.jobs.name, StateKeys.job(otherRun.run, otherRun.cell)),
      directGet(Buckets.jobs.name, StateKeys.jobRun(otherRun.run)),
      directGet(Buckets.jobs.name, StateKeys.runKey(otherRun.run)),
      directGet(Buckets.progress.name, ProgressKeys.cell(otherRun.run, otherRun.cell)),
      directGet(Buckets.progress.name, ProgressKeys.run(me.run)),
      directGet(Buckets.budgets.name, StateKeys.budget(me.run)),
      directGet(Buckets.control.name, StateKeys.control(me.run)),
      directGet(Buckets.pacer.name, StateKeys.pacerPool("other__pool")),
      // the non-direct form, where the key is in the body and a subject permission could not tell them apart
      `$JS.API.STREAM.MSG.GET.KV_${Buckets.jobs.name}`,
    ])
      await deniedRequest(nc, subject);
  });

  it("cannot use the JetStream API on other streams, nor subscribe to others' subjects or inboxes", async () => {
    const nc = await connectAs(me);
    for (const subject of [
      "$JS.API.INFO",
      "$JS.API.STREAM.NAMES",
      `$JS.API.STREAM.INFO.${Streams.ledger.name}`,
      `$JS.API.STREAM.INFO.KV_${Buckets.budgets.name}`,
      `$JS.API.STREAM.DELETE.${Streams.ledger.name}`,
      `$JS.API.STREAM.PURGE.KV_${Buckets.progress.name}`,
      "$JS.API.STREAM.CREATE.MINE",
      `$JS.API.CONSUMER.CREATE.${Streams.attempts.name}`,
      `$JS.API.CONSUMER.MSG.NEXT.${Streams.cells.name}.dispatcher`,
      "$JS.API.STREAM.INFO.OBJ_blobs",
    ])
      await deniedRequest(nc, subject, "{}");
    for (const subject of [
      ">",
      "ledger.>",
      Subjects.ledger.one(me.run, me.cell),
      Subjects.cells.all,
      Subjects.events.all,
      `$KV.${Buckets.jobs.name}.>`,
      "$JS.API.>",
      "_INBOX.>",
      `${taskInboxPrefix(sibling)}.>`,
      `${taskInboxPrefix(nextAttempt)}.>`,
    ])
      await deniedSubscribe(nc, subject);
  });

  it("another task's credential is bound the same way: the sibling cannot read this cell's job or hear its signal", async () => {
    const nc = await connectAs(sibling);
    const jobs = await new Kvm(jetstream(nc, { timeout: 5_000 })).open(Buckets.jobs.name, DIRECT);
    assert.equal(
      (await jobs.get(StateKeys.job(sibling.run, sibling.cell)))?.string(),
      `job of ${sibling.cell} in ${sibling.run}`,
    );
    await deniedRequest(nc, directGet(Buckets.jobs.name, StateKeys.job(me.run, me.cell)));
    await deniedRequest(nc, directGet(Buckets.jobs.name, StateKeys.jobTask(me.run, me.task)));
    await deniedSubscribe(nc, Subjects.attemptSignal(me.run, me.cell, me.attempt));
    await deniedSubscribe(nc, `${taskInboxPrefix(me)}.>`);
  });
});
