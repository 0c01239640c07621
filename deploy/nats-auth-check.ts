/**
 * Proves deploy/lib/nats-auth.ts against a real nats-server (2.9+ on PATH): a task user, on its nkey, can publish
 * its own ledger entry and progress key into ACTORS' JetStream and read its own job spec, and is refused
 * everything of another attempt. Run: `npx tsx deploy/nats-auth-check.ts` (exit code 0 = as designed).
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { Kvm } from "@nats-io/kv";
import { createUser } from "@nats-io/nkeys";
import { connect, nkeyAuthenticator } from "@nats-io/transport-node";
import { ProgressKeys, StateKeys, Subjects } from "../protocol/subjects.js";
import { natsAuthorization, renderNatsConf, type TaskIdentity, taskInboxPrefix } from "./lib/nats-auth.js";

const me: TaskIdentity = { run: "run:1", cell: "astropy__astropy-12907", attempt: 2, pool: "claude__sonnet" };
const other: TaskIdentity = { ...me, cell: "django__django-11099" };

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

async function main(): Promise<number> {
  const kp = createUser();
  const dir = mkdtempSync(join(tmpdir(), "ef-natsauth-"));
  const port = await freePort();
  writeFileSync(
    join(dir, "auth.conf"),
    renderNatsConf(
      natsAuthorization({
        actors: [{ user: "planner", password: { env: "EF_ACTORS_PW" } }],
        gateway: [{ user: "gateway", password: { env: "EF_GATEWAY_PW" } }],
        tasks: [{ task: me, nkey: kp.getPublicKey() }],
      }),
    ),
  );
  writeFileSync(
    join(dir, "nats.conf"),
    `port: ${port}\njetstream: { store_dir: "${dir}/js" }\ninclude "auth.conf"\n`,
  );
  const server = spawn("nats-server", ["-c", join(dir, "nats.conf")], {
    env: { ...process.env, EF_ACTORS_PW: "actors-pw", EF_GATEWAY_PW: "gateway-pw" },
    stdio: "ignore",
  });
  const servers = `127.0.0.1:${port}`;
  let failures = 0;
  const expect = async (label: string, allowed: boolean, f: () => Promise<unknown>): Promise<void> => {
    let ok: boolean;
    let detail: string;
    try {
      detail = String(await f());
      ok = allowed;
    } catch (err) {
      detail = `refused: ${(err as Error).message.slice(0, 90)}`;
      ok = !allowed;
    }
    if (!ok) failures++;
    process.stdout.write(`${ok ? "ok  " : "FAIL"} ${label.padEnd(44)} ${detail}\n`);
  };
  try {
    let actor: Awaited<ReturnType<typeof connect>> | undefined;
    for (let i = 0; i < 50 && !actor; i++) {
      actor = await connect({ servers, user: "planner", pass: "actors-pw" }).catch(async () => {
        await new Promise((r) => setTimeout(r, 100));
        return undefined;
      });
    }
    if (!actor) throw new Error("nats-server did not start");
    const jsm = await jetstreamManager(actor);
    await jsm.streams.add({ name: "EF_LEDGER", subjects: [Subjects.ledger.all] });
    const kvm = new Kvm(actor);
    const progress = await kvm.create("progress");
    const jobs = await kvm.create("jobs");
    await jobs.put(StateKeys.job(me.run, me.cell), "my job");
    await jobs.put(StateKeys.job(other.run, other.cell), "their job");

    const task = await connect({
      servers,
      authenticator: nkeyAuthenticator(kp.getSeed()),
      inboxPrefix: taskInboxPrefix(me),
    });
    const js = jetstream(task, { timeout: 2000 });
    const directGet = (t: TaskIdentity) =>
      `$JS.API.DIRECT.GET.KV_jobs.$KV.jobs.${StateKeys.job(t.run, t.cell)}`;
    await expect(
      "own ledger entry (JetStream ack)",
      true,
      async () => (await js.publish(Subjects.ledger.one(me.run, me.cell), "{}")).seq,
    );
    await expect(
      "another cell's ledger",
      false,
      async () => (await js.publish(Subjects.ledger.one(other.run, other.cell), "{}")).seq,
    );
    await expect(
      "own progress key",
      true,
      async () => (await js.publish(`$KV.progress.${ProgressKeys.cell(me.run, me.cell)}`, "p")).seq,
    );
    await expect(
      "the run's progress key",
      false,
      async () => (await js.publish(`$KV.progress.${ProgressKeys.run(me.run)}`, "p")).seq,
    );
    await expect("own job spec (direct get)", true, async () =>
      (await task.request(directGet(me), undefined, { timeout: 2000 })).string(),
    );
    await expect("another cell's job spec", false, async () =>
      (await task.request(directGet(other), undefined, { timeout: 2000 })).string(),
    );
    await expect("create a stream", false, async () =>
      jetstreamManager(task).then((m) => m.streams.add({ name: "X", subjects: ["x"] })),
    );
    await expect("actor sees the task's progress", true, async () =>
      (await progress.get(ProgressKeys.cell(me.run, me.cell)))?.string(),
    );
    await task.close();
    await actor.close();
  } finally {
    server.kill();
    rmSync(dir, { recursive: true, force: true });
  }
  return failures === 0 ? 0 : 1;
}

process.exitCode = await main();
