/**
 * The hostile-harness suite, with real containers: a command harness that tries each escape it can from inside
 * its sandbox — secrets in its environment and in /proc, host mounts (/proc/self/mountinfo), the host's loopback
 * (NATS, the provider, the gateway, PostgreSQL), the mirror and the task library, later git objects (the fix's real
 * blob id), alternates, reflogs, packed refs, an fsmonitor for the patch collection, a daemon, a fork bomb, a memory
 * hog — and writes every hit as a `FOUND` line into its patch. Its calls go through a real gateway with its
 * attempt's key. The attempt must land with zero findings, no container of it may remain, and the plane must be
 * unharmed (NATS, gateway, PostgreSQL serving; nothing landed for another attempt). A second harness runs where the
 * network is shared (unsandboxed, as in the ECS task's namespace) and tries NATS without a credential and with its
 * attempt's leaked one, and the gateway without a key. Needs a Docker API (DOCKER_HOST or the default socket): CI
 * starts one (.ci/docker.sh).
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { ContainerRuntime } from "../../containers/index.js";
import { type Gateway, startGateway } from "../../gateway/server.js";
import { mintAttemptUser } from "../../plane/nats-auth.js";
import { ApiSubjects, StateKeys, Subjects } from "../../protocol/subjects.js";
import { Buckets, ObjectStores, Streams } from "../../protocol/topology.js";
import { createAttemptKey } from "../../store/keys.js";
import { ATTEMPT_LABEL, attemptLabel } from "../../task/sandbox.js";
import { attemptDirs } from "../../task/workdir.js";
import { type FreshDb, freshDb } from "../helpers/db.js";
import { testRootfs, testRuntime } from "../helpers/docker.js";
import { FIXED_CALC, LIBRARY, RUN_KEY, startTaskRig, type TaskRig } from "./task-fixture.js";

const SCRIPT = String.raw`
found() { echo "FOUND $*" >> findings.txt; }
: > findings.txt
# secrets in the environment and in every process's environ
PLANTED="$PLANTED_A$PLANTED_B"
env | grep -q "$PLANTED" && found "the run key in the harness environment"
env | grep -Eq '^(NATS_URL|DATABASE_URL|EVALFLEET_RUN_KEY|ANTHROPIC_API_KEY=sk|EVALFLEET_JUDGE_KEY|PROVIDER_KEYS|ANTHROPIC_ADMIN_KEY|OPENAI_ADMIN_KEY)' && found "a plane variable in the environment"
for f in /proc/[0-9]*/environ; do grep -aq "sk-ant-admin-planted" "$f" 2>/dev/null && found "a provider admin key in $f"; done
for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do grep -aq "$PLANTED" "$f" 2>/dev/null && found "the run key in $f"; done
# the host's files: the mirror cache, the task library, the task's own folder, the docker socket
for p in "$MIRRORS" "$LIBRARY_DIR" "$TASK_DIR" /var/run/docker.sock /run/efdocker/docker.sock; do [ -e "$p" ] && found "host path $p"; done
# mounts: nothing of the host but its workdir and the shim's socket folder (docker's own init and name files aside)
while read -r _ _ _ root mp _; do
  case "$mp" in
    /|/proc|/proc/*|/dev|/dev/*|/sys|/sys/*|/tmp|/etc/hostname|/etc/hosts|/etc/resolv.conf) ;;
    /sbin/docker-init|/usr/sbin/docker-init) ;;
    /run/evalfleet-shim|/testbed) ;;
    "$WORK_ROOT"|"$WORK_ROOT"/*) ;;
    *) found "a host mount at $mp (from $root)";;
  esac
done < /proc/self/mountinfo
# the host's loopback: NATS, the provider, the gateway, PostgreSQL, the default NATS
for port in $NATS_PORT $PROVIDER_PORT $GATEWAY_PORT 5432 4222; do
  node -e 'const s=require("net").connect(+process.argv[1],"127.0.0.1");s.on("connect",()=>{console.log("open");process.exit(0)});s.on("error",()=>process.exit(1));setTimeout(()=>process.exit(1),2000)' $port >/dev/null 2>&1 && found "loopback port $port answers"
done
# git: history, objects, alternates, reflogs, packed refs
[ "$(git rev-list --all | wc -l)" = 1 ] || found "more than one commit"
[ -e .git/objects/info/alternates ] && found "alternates"
[ -e .git/packed-refs ] && found "packed refs"
[ -d .git/logs ] && found "reflogs"
git cat-file -e "$FIX_BLOB" 2>/dev/null && found "the fix blob"
git cat-file --batch-all-objects --batch-check | grep -q "$FIX_BLOB" && found "the fix blob in the object store"
git cat-file --batch-all-objects --batch-check='%(objectname)' | while read o; do git cat-file -p "$o" 2>/dev/null | grep -q 'a + b' && found "the fix text in $o"; done
# an fsmonitor and a filter for the task's patch collection to run
printf '#!/bin/sh\necho ran > %s/fsmonitor-ran\n' "$OUT_DIR" > "$HOME/evil.sh"; chmod +x "$HOME/evil.sh"
git config core.fsmonitor "$HOME/evil.sh"; git config filter.evil.clean "$HOME/evil.sh"; echo '* filter=evil' > .gitattributes
# the way out that must work: the shim
node -e 'fetch(process.env.OPENAI_BASE_URL+"/chat/completions",{method:"POST",headers:{"content-type":"application/json",authorization:"Bearer x"},body:JSON.stringify({model:process.env.EVALFLEET_MODEL,messages:[{role:"user",content:"hi"}]})}).then(r=>process.exit(r.ok?0:1),()=>process.exit(1))' || found "the shim did not answer"
# a daemon (left running: the container's end must take it), a fork bomb (stops at the pids limit), a memory hog
setsid sh -c 'sleep 600' > /dev/null 2>&1 < /dev/null &
setsid sh -c 'i=0; while [ $i -lt 400 ]; do sleep 30 & i=$((i+1)); done; wait' > /dev/null 2>&1 < /dev/null &
BOMB=$!; sleep 3; [ "$(ls -d /proc/[0-9]* | wc -l)" -gt 200 ] && found "the fork bomb passed the pids limit"; kill -9 -$BOMB 2>/dev/null; sleep 1
node -e 'const a=[];for(;;)a.push(Buffer.alloc(64*1024*1024,1))' >/dev/null 2>&1 && found "the memory hog was not stopped"
echo "findings: $(grep -c FOUND findings.txt)" >> findings.txt
exit 0
`;

/**
 * The same harness where the network is shared — unsandboxed here, the ECS task's shared network namespace there:
 * NATS and the gateway answer it, and must refuse it. Without a credential NATS takes nothing; with its attempt's
 * NATS credential leaked to it (planted in its folder, as a harness that read the task's memory would have it) it
 * reaches only its own attempt's subjects and keys.
 */
const SHARED_NETWORK_PROBE = String.raw`
const fs = require("node:fs");
const found = (what) => fs.appendFileSync("findings.txt", "FOUND " + what + "\n");
fs.writeFileSync("findings.txt", "");
(async () => {
  const { connect, credsAuthenticator } = await import(process.env.NATS_MODULE);
  const servers = process.env.NATS_SERVERS;
  try {
    const nc = await connect({ servers, maxReconnectAttempts: 0, timeout: 3000 });
    found("NATS let an anonymous client in");
    await nc.close();
  } catch {}
  const nc = await connect({
    servers,
    authenticator: credsAuthenticator(fs.readFileSync(process.env.LEAKED_CREDS)),
    inboxPrefix: process.env.LEAKED_INBOX,
    maxReconnectAttempts: 0,
  });
  // Another cell's, the next attempt's and another run's result; reading another cell's job and gateway key.
  for (const subject of JSON.parse(process.env.FORBIDDEN_REQUESTS)) {
    try {
      await nc.request(subject, JSON.stringify({ forged: true }), { timeout: 3000 });
      found("a request on " + subject + " was answered");
    } catch {}
  }
  for (const subject of ["attempts.>", "_INBOX.>", "$KV.jobs.>", ">"]) {
    const sub = nc.subscribe(subject);
    const closed = await Promise.race([sub.closed.then(() => true, () => true), new Promise((r) => setTimeout(() => r(false), 3000))]);
    if (!closed) found("subscribed to " + subject);
  }
  await nc.close().catch(() => {});
  // The gateway: without its attempt's key, nothing.
  const r = await fetch(process.env.GATEWAY_URL + "/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "gpt-5-mini", messages: [{ role: "user", content: "hi" }] }),
  });
  if (r.status !== 401) found("the gateway answered a keyless call with " + r.status);
  const n = fs.readFileSync("findings.txt", "utf8").split("\n").filter(Boolean).length;
  fs.appendFileSync("findings.txt", "findings: " + n + "\n");
})().catch((e) => {
  found("the probe failed: " + e);
  fs.appendFileSync("findings.txt", "findings: broken\n");
});
`;

let rig: TaskRig;
let rt: ContainerRuntime;
let dockerHost: string;
let rootfs: string;
let store: FreshDb;
let gw: Gateway;

/** The fix's `calc.js` as git stores it: the blob a harness looking for the future would look for. */
const FIX_BLOB_ID = createHash("sha1")
  .update(`blob ${Buffer.byteLength(FIXED_CALC)}\0`)
  .update(FIXED_CALC)
  .digest("hex");

before(async () => {
  ({ runtime: rt, dockerHost } = await testRuntime());
  rootfs = await testRootfs();
  rig = await startTaskRig();
  // The attempts' calls go through a real gateway, as deployed: the shim holds the attempt's key, the gateway the
  // provider's.
  store = await freshDb("hostile");
  gw = await startGateway({
    db: store.db,
    aliases: {
      "gpt-5-mini": { upstream: { provider: "openai", baseUrl: rig.provider.url, apiKey: RUN_KEY } },
    },
  });
});
after(async () => {
  await gw?.close();
  await store?.cleanup();
  await rig?.close();
});

/** The attempt's gateway key, minted as the dispatcher mints it, in the jobs bucket where its task reads it. */
async function attemptKey(run: string, cell: string, attempt: number): Promise<string> {
  const key = await createAttemptKey(store.db, {
    run,
    cellId: cell,
    attempt,
    models: ["gpt-5-mini"],
    capNanoUsd: null,
    exempt: false,
  });
  await rig.plane.kv.jobs.put(StateKeys.attemptKey(run, cell, attempt), key);
  return key;
}

/** The plane is unharmed: NATS, the gateway and PostgreSQL still serve, and nothing landed for another attempt. */
async function assertPlaneUnharmed(run: string, cell: string, attempt: number): Promise<void> {
  assert.ok(await rig.plane.kv.jobs.get(StateKeys.job(run, cell)), "NATS still serves the jobs bucket");
  const keyless = await fetch(`${gw.url}/v1/chat/completions`, { method: "POST", body: "{}" });
  assert.equal(keyless.status, 401, "the gateway still answers (and refuses a keyless call)");
  assert.equal((await store.db.query("SELECT 1 AS one")).rows.length, 1, "PostgreSQL still answers");
  for (const stream of [Streams.attempts.name, Streams.ledger.name]) {
    const info = await rig.plane.jsm.streams.info(stream, { subjects_filter: ">" });
    const mine =
      stream === Streams.attempts.name
        ? Subjects.attempts.one(run, cell, attempt)
        : Subjects.ledger.one(run, cell, attempt);
    for (const subject of Object.keys(info.state.subjects ?? {}))
      if (subject.includes(`.${run}.`))
        assert.equal(subject, mine, `${stream}: only this attempt's messages`);
  }
  const spent = await store.db.query<{ cell_id: string; run_name: string }>(
    "SELECT DISTINCT run_name, cell_id FROM gateway_spend_log WHERE run_name = $1",
    [run],
  );
  assert.deepEqual(spent.rows, [{ run_name: run, cell_id: cell }], "the gateway billed this cell only");
}

describe("a hostile harness in its container finds nothing", { timeout: 900_000 }, () => {
  test("every escape fails, the attempt lands with zero findings, nothing of it survives", async () => {
    const run = "hostile";
    const ref = { run, cell: "", attempt: 1 };
    const cell = await rig.plan({
      name: run,
      harnesses: [{ name: "evil", adapter: "command", settings: { command: SCRIPT } }],
      sandbox: { memory_mb: 256, pids: 128, cpus: 1, tmp_mb: 64 },
      timeout_seconds: 240,
    });
    ref.cell = cell;
    const dirs = attemptDirs(rig.workRoot, ref);
    const natsPort = new URL(rig.nats.url).port;
    const providerPort = new URL(rig.provider.url).port;
    const gatewayPort = new URL(gw.url).port;
    const key = await attemptKey(run, cell, 1);
    // The harness learns what to look for from its settings, as a curious agent would guess it.
    const planted = await rig.plan({
      name: run,
      harnesses: [
        {
          name: "evil",
          adapter: "command",
          settings: {
            command: SCRIPT,
            env: {
              // The attempt's key in two halves: the harness can look for it without being given it whole.
              PLANTED_A: key.slice(0, 10),
              PLANTED_B: key.slice(10),
              MIRRORS: rig.mirrorRoot,
              LIBRARY_DIR: LIBRARY,
              TASK_DIR: dirs.taskDir,
              OUT_DIR: dirs.out,
              WORK_ROOT: dirs.harnessRoot,
              NATS_PORT: natsPort,
              PROVIDER_PORT: providerPort,
              GATEWAY_PORT: gatewayPort,
              // The fix's `a + b` is in the task's gold patch and nowhere in the base.
              FIX_BLOB: FIX_BLOB_ID,
            },
          },
        },
      ],
      sandbox: { memory_mb: 256, pids: 128, cpus: 1, tmp_mb: 64 },
      timeout_seconds: 240,
    });
    assert.equal(planted, cell);
    const r = await rig.run(run, cell, 1, {
      upstream: gw.url,
      runKey: key,
      env: {
        PATH: process.env.PATH ?? "",
        HOME: "/tmp",
        EVALFLEET_SANDBOX: "container",
        DOCKER_HOST: dockerHost,
        EVALFLEET_BASE_ROOTFS: rootfs,
        // A host that exported the gateway's admin key (usage reports) and provider secret by mistake: neither may
        // reach the harness.
        ANTHROPIC_ADMIN_KEY: "sk-ant-admin-planted",
        PROVIDER_KEYS: JSON.stringify({ anthropic_admin: "sk-ant-admin-planted" }),
      },
      keepWorkdir: true,
    });
    assert.equal(r.sandbox, "container", JSON.stringify(r).slice(0, 2000));
    const patch = (await rig.patch(r)) ?? "";
    assert.match(patch, /\+findings: 0/, `the harness found something:\n${patch}\n${r.stdout}\n${r.stderr}`);
    assert.doesNotMatch(patch, /FOUND/);
    assert.equal(r.status, "PATCH_READY", r.errorMessage ?? "");
    assert.equal(
      existsSync(`${dirs.out}/fsmonitor-ran`),
      false,
      "the planted fsmonitor ran during collection",
    );
    assert.deepEqual(
      await rt.list({ [ATTEMPT_LABEL]: attemptLabel(ref) }),
      [],
      "a container of the attempt survived",
    );
    assert.ok(rig.provider.bill().total.calls >= 1, "the shim answered, through the gateway");
    await assertPlaneUnharmed(run, cell, 1);
  });
});

describe("a hostile harness on a shared network (unsandboxed; the ECS task's namespace)", {
  timeout: 600_000,
}, () => {
  test("NATS refuses it without a credential; a leaked attempt credential reaches only its own attempt", async () => {
    const run = "hostile-net";
    const other = "hostile-other";
    const probe = ["node", "-e", SHARED_NETWORK_PROBE];
    const cell = await rig.plan({
      name: run,
      harnesses: [{ name: "net", adapter: "command", settings: { command: probe } }],
      timeout_seconds: 120,
    });
    const otherCell = await rig.plan({ name: other, harnesses: [{ name: "net", adapter: "command" }] });
    const dirs = attemptDirs(rig.workRoot, { run, cell, attempt: 1 });
    // The attempt's own NATS user, as the dispatcher mints it — leaked into the harness's reach.
    const leaked = await mintAttemptUser(
      rig.nats.signer,
      { run, cell, attempt: 1, task: "sample-calc-add" },
      Date.now() + 600_000,
    );
    const leakedFile = join(await mkdtemp(join(tmpdir(), "ef-leak-")), "attempt.creds");
    await writeFile(leakedFile, leaked.creds);
    const forbidden = [
      Subjects.attempts.one(run, cell.replace(/__r0$/, "__r1"), 1),
      Subjects.attempts.one(other, otherCell, 1),
      Subjects.attempts.one(run, cell, 2),
      Subjects.ledger.one(other, otherCell, 1),
      ApiSubjects.kvDirectGet(Buckets.jobs.name, StateKeys.job(other, otherCell)),
      ApiSubjects.kvDirectGet(Buckets.jobs.name, StateKeys.attemptKey(run, cell, 2)),
      ApiSubjects.kvMsgGet(Buckets.jobs.name),
      `$JS.API.STREAM.MSG.GET.OBJ_${ObjectStores.blobs.name}`,
      `$JS.API.STREAM.PURGE.${Streams.attempts.name}`,
    ];
    await rig.plan({
      name: run,
      harnesses: [
        {
          name: "net",
          adapter: "command",
          settings: {
            command: probe,
            env: {
              NATS_MODULE: import.meta.resolve("@nats-io/transport-node"),
              NATS_SERVERS: rig.nats.url,
              LEAKED_CREDS: leakedFile,
              LEAKED_INBOX: leaked.inboxPrefix,
              FORBIDDEN_REQUESTS: JSON.stringify(forbidden),
              GATEWAY_URL: gw.url,
            },
          },
        },
      ],
      timeout_seconds: 120,
    });
    const key = await attemptKey(run, cell, 1);
    const r = await rig.run(run, cell, 1, {
      upstream: gw.url,
      runKey: key,
      env: { PATH: process.env.PATH ?? "", HOME: "/tmp", EVALFLEET_SANDBOX: "process" },
      keepWorkdir: true,
    });
    assert.equal(r.sandbox, "process");
    const patch = (await rig.patch(r)) ?? "";
    assert.match(patch, /\+findings: 0/, `the harness got through:\n${patch}\n${r.stdout}\n${r.stderr}`);
    assert.ok(existsSync(dirs.repo), "the attempt ran");
    const attempts = await rig.plane.jsm.streams.info(Streams.attempts.name, { subjects_filter: ">" });
    for (const s of forbidden.filter((x) => x.startsWith("attempts.")))
      assert.equal(attempts.state.subjects?.[s], undefined, `${s} landed`);
  });
});
