/**
 * Secrets planted everywhere a harness, a run config or an error can put them never land: not in any column of
 * any table, not in any object-store blob, not in any KV key or value, not in any stream message, not in any log
 * line of the actors, the gateway or the task processes. The attempts run the real path: the planner makes the run's
 * gateway key, the dispatcher launches `evalfleet task` processes (local backend), each task's shim forwards through
 * the gateway (which alone holds the provider key) to the scripted provider, the results-writer lands the rows,
 * the grader grades the patch.
 */
import assert from "node:assert/strict";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import type { KV } from "@nats-io/kv";
import { startDispatcher } from "../../actors/dispatcher/actor.js";
import { LocalBackend } from "../../actors/dispatcher/backends/local.js";
import { startGraderSupervisor } from "../../actors/grader-supervisor/actor.js";
import { startPlanner } from "../../actors/planner/actor.js";
import { startResultsWriter } from "../../actors/results-writer/actor.js";
import type { Actor } from "../../actors/runtime/actor.js";
import { type Gateway, startGateway } from "../../gateway/server.js";
import { createLogger } from "../../lib/log.js";
import { openPlane, type Plane } from "../../plane/connect.js";
import { ProgressKeys, StateKeys, Subjects } from "../../protocol/subjects.js";
import { Streams } from "../../protocol/topology.js";
import { type ScriptedProvider, startScriptedProvider } from "../../scripted-provider/index.js";
import { quoteIdent } from "../../store/db.js";
import { type FreshDb, freshDb } from "../helpers/db.js";
import { startNats, type TestNats } from "../helpers/nats.js";
import { waitFor } from "../helpers/wait.js";

const RUN = "leaky";
/** The provider key only the gateway holds (it forwards every call upstream with it). */
const UPSTREAM_KEY = "sk-ant-api03-PLANTEDupstream0123456789abcdefghijkl";
/** Keys in the task process's environment, which a harness can read through /proc/<task>/environ. */
const TASK_ENV_KEY = "sk-proj-PLANTEDtaskenv0123456789abcdefgh";
const TASK_AWS_SECRET = "PLANTEDawsSecret/wJalrXUtnFEMI+K7MDENG";
const BEARER = "PLANTEDbearer0123456789abcdefghijkl";
const AWS_ID = "AKIAPLANTEDEXAMPLE23";
/** A key a submitter put in a run config's harness settings. */
const CONFIG_KEY = "sk-ant-api03-PLANTEDconfig0123456789abcdefghijk";

const MODEL = "gpt-5-mini";
/** The real path (task processes, grading) is slow on a loaded machine. */
const WAIT_MS = 150_000;

let nats: TestNats;
let store: FreshDb;
let provider: ScriptedProvider;
let gateway: Gateway;
let tmp: string;
let logText = "";
const planes: Plane[] = [];
const actors: Actor[] = [];
let client: Plane;
/** The run's gateway key, made by the planner; known once the run is planned. */
let gatewayKeys: string[] = [];

const logSink = new Writable({
  write(chunk, _enc, cb) {
    logText += String(chunk);
    cb();
  },
});
const logger = (name: string) => createLogger({ name, level: "debug", destination: logSink });

async function plane(name: string): Promise<Plane> {
  const p = await openPlane({ nats: nats.settings, name });
  planes.push(p);
  return p;
}

/**
 * The harness: prints every secret it was handed (stdout and stderr, and an Authorization header), writes them into
 * its trajectory as JSON lines (after an escaped newline), dumps the task's environment, calls the model through
 * the shim with a secret in the prompt and another as the model name, fixes the task, and exits with $1.
 */
function harnessScript(plant: string): string {
  return `#!/bin/sh
for i in $(seq 1 300); do [ -s "${plant}" ] && break; sleep 0.05; done
S=$(cat "${plant}")
echo "harness says: $S"
echo "Authorization: Bearer ${BEARER}"
echo "aws: ${AWS_ID}"
echo "stderr copy: $S" >&2
node -e '
const fs = require("node:fs");
for (const s of process.argv[1].split(" "))
  fs.appendFileSync(process.env.EVALFLEET_TRAJECTORY, JSON.stringify({ type: "message", text: "key:\\n" + s }) + "\\n");
' "$S"
tr '\\0' '\\n' < /proc/$PPID/environ
node -e '
const [secrets] = process.argv.slice(1);
const call = (model, content) => fetch(process.env.OPENAI_BASE_URL + "/chat/completions", {
  method: "POST",
  headers: { "content-type": "application/json", authorization: "Bearer " + process.env.OPENAI_API_KEY },
  body: JSON.stringify({ model, max_tokens: 16, messages: [{ role: "user", content }] }),
}).then((r) => r.text()).then((t) => console.log("model said:", t.slice(0, 300)));
(async () => {
  await call("${MODEL}", "here are my keys: " + secrets);
  await call(secrets.split(" ")[0], "hello");
})().catch((e) => { console.error("call failed", e); });
' "$S"
sed -i '0,/a - b;/s//a + b;/' calc.js
if [ "$1" != 0 ]; then echo "fatal: crashing with $S" >&2; fi
exit "$1"
`;
}

before(async () => {
  nats = await startNats();
  store = await freshDb("secrets");
  tmp = await mkdtemp(join(tmpdir(), "ef-secrets-"));
  provider = await startScriptedProvider({ keys: [UPSTREAM_KEY], scenario: { text: "ok" } });
  gateway = await startGateway({
    db: store.db,
    aliases: { [MODEL]: { upstream: { provider: "openai", baseUrl: provider.url, apiKey: UPSTREAM_KEY } } },
    log: logger("gateway"),
  });
  client = await plane("test-client");
  actors.push(
    await startPlanner({
      plane: await plane("planner"),
      db: store.db,
      log: logger("planner"),
      libraryRoots: [resolve("examples")],
    }),
  );
  actors.push(
    await startResultsWriter({
      plane: await plane("results-writer"),
      db: store.db,
      log: logger("results-writer"),
      progressIntervalMs: 200,
    }),
  );
  actors.push(
    await startGraderSupervisor({
      plane: await plane("grader"),
      db: store.db,
      log: logger("grader"),
      env: process.env,
    }),
  );
  const taskLog = join(tmp, "tasks.log");
  actors.push(
    await startDispatcher({
      plane: await plane("dispatcher"),
      db: store.db,
      log: logger("dispatcher"),
      natsSigner: nats.signer,
      backend: new LocalBackend({
        inheritedEnv: process.env,
        // Every task's own output (its logger) goes to a file the test scans.
        command: ["/bin/sh", "-c", 'exec "$0" bin/evalfleet.js task >>"$1" 2>&1', process.execPath, taskLog],
        env: {
          ...nats.env,
          EVALFLEET_GATEWAY_URL: gateway.url,
          EVALFLEET_WORKDIR: join(tmp, "work"),
          EVALFLEET_GIT_MIRRORS: join(tmp, "mirrors"),
          EVALFLEET_LOG_LEVEL: "debug",
          OPENAI_API_KEY: TASK_ENV_KEY,
          AWS_SECRET_ACCESS_KEY: TASK_AWS_SECRET,
        },
        log: logger("local-backend"),
        // Unsandboxed on purpose: the harness reads the planted keys from a host file, as a harness beside its task
        // could; redaction must hold there too. The container boundary is the hostile-harness suite's.
        sandbox: "process",
      }),
      capacityPollMs: 50,
      observeMs: 100,
    }),
  );
});

after(async () => {
  for (const a of actors.reverse()) await a.stop();
  for (const p of planes) await p.close();
  await gateway?.close();
  await provider?.close();
  await store?.cleanup();
  await nats?.cleanup();
  await rm(tmp, { recursive: true, force: true });
});

async function progressPhase(run: string): Promise<string | undefined> {
  const e = await client.kv.progress.get(ProgressKeys.run(run));
  return e?.operation === "PUT" ? (e.json() as { phase: string }).phase : undefined;
}

/** Every place evalfleet keeps something, as (where, text) pairs. */
async function everythingStored(): Promise<Array<[string, string]>> {
  const out: Array<[string, string]> = [];
  const tables = await store.db.query<{ table_name: string }>(
    "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'",
  );
  assert.ok(tables.rows.length >= 8, "the results schema is there");
  for (const { table_name } of tables.rows) {
    const rows = await store.db.query<{ j: string }>(
      `SELECT row_to_json(t)::text AS j FROM ${quoteIdent(table_name)} t`,
    );
    for (const r of rows.rows) out.push([`table ${table_name}`, r.j]);
  }
  for (const info of await client.blobs.list()) {
    const data = await client.blobs.getBlob(info.name);
    out.push([`blob ${info.name}`, `${info.name}\n${Buffer.from(data ?? []).toString("utf8")}`]);
  }
  const buckets: Record<string, KV> = client.kv;
  for (const [name, kv] of Object.entries(buckets)) {
    for await (const key of await kv.keys()) {
      const e = await kv.get(key);
      out.push([`kv ${name} ${key}`, `${key}\n${e?.string() ?? ""}`]);
    }
  }
  // Every message every stream still holds: KV history, object chunks, events, results, the ledger.
  for await (const s of client.jsm.streams.list()) {
    for (let seq = s.state.first_seq; seq > 0 && seq <= s.state.last_seq; seq++) {
      const m = await client.jsm.streams.getMessage(s.config.name, { seq }).catch(() => null);
      if (m) out.push([`stream ${s.config.name} #${seq} ${m.subject}`, `${m.subject}\n${m.string()}`]);
    }
  }
  out.push(["logs of the actors and the gateway", logText]);
  out.push(["logs of the task processes", await readFile(join(tmp, "tasks.log"), "utf8").catch(() => "")]);
  return out;
}

describe("planted secrets never land", { timeout: 240_000 }, () => {
  it("a run config carrying a key is refused, and the refusal does not carry it", async () => {
    await client.js.publish(
      Subjects.runSubmit,
      JSON.stringify({
        name: "leaky-config",
        harnesses: [
          {
            name: "cmd",
            adapter: "command",
            settings: {
              command: "true",
              env: { ANTHROPIC_API_KEY: CONFIG_KEY },
              args: [`--key=${CONFIG_KEY}`],
            },
          },
        ],
        models: [{ name: MODEL, provider: "openai" }],
        tasks: ["*"],
        task_library_path: resolve("examples/tasks"),
      }),
    );
    await waitFor(
      "the rejection",
      async () => ((await progressPhase("leaky-config")) === "rejected" ? true : undefined),
      WAIT_MS,
    );
    // The refusal names the field, and carries no part of the key: not its progress key, not its event.
    const progress = await client.kv.progress.get(ProgressKeys.run("leaky-config"));
    const refusal = progress?.string() ?? "";
    assert.match(refusal, /looks like a secret/);
    const events: string[] = [];
    const stream = await client.jsm.streams.info(Streams.events.name);
    for (let seq = stream.state.first_seq; seq > 0 && seq <= stream.state.last_seq; seq++) {
      const m = await client.jsm.streams.getMessage(Streams.events.name, { seq }).catch(() => null);
      if (m?.subject === Subjects.events.run("leaky-config")) events.push(m.string());
    }
    assert.ok(
      events.some((e) => /rejected/.test(e)),
      "the rejection was published as an event",
    );
    const places: Array<[string, string]> = [
      ["the progress key", refusal],
      ...events.map((e): [string, string] => ["an event", e]),
    ];
    for (const [where, text] of places) {
      assert.ok(!text.includes(CONFIG_KEY), `${where} carries the planted key: ${text}`);
      assert.ok(
        !text.includes(CONFIG_KEY.slice(14, 40)),
        `${where} carries part of the planted key: ${text}`,
      );
    }
  });

  it("harness output, trajectories, crashes, the task's environment and model calls: nothing reaches storage or logs", async () => {
    const plant = join(tmp, "plant.txt");
    const script = join(tmp, "leak.sh");
    await writeFile(script, harnessScript(plant));
    await chmod(script, 0o755);
    const harness = (name: string, exit: number) => ({
      name,
      adapter: "command",
      settings: { command: ["/bin/sh", script, String(exit)] },
    });
    await client.js.publish(
      Subjects.runSubmit,
      JSON.stringify({
        name: RUN,
        harnesses: [harness("leak", 0), harness("crash", 3)],
        models: [{ name: MODEL, provider: "openai" }],
        tasks: ["sample-calc-add"],
        task_library_path: resolve("examples/tasks"),
        unvalidated: true,
        timeout_seconds: 90,
        budget_usd: 5,
        // both at once: each harness waits for the plant, which holds both attempts' keys
        parallel_runs: 2,
      }),
    );
    // Each attempt's gateway key exists once the dispatcher launches it; the harnesses print both along with the rest.
    const attemptKeys = async () => {
      const names: string[] = [];
      for await (const k of await client.kv.jobs.keys(StateKeys.attemptKeysOfRun(RUN))) names.push(k);
      return names;
    };
    gatewayKeys = await waitFor(
      "both attempts' gateway keys",
      async () => {
        const names = await attemptKeys();
        if (names.length < 2) return undefined;
        const values = await Promise.all(
          names.map(async (k) => (await client.kv.jobs.get(k))?.string() ?? ""),
        );
        return values.every((v) => v.length > 0) ? values : undefined;
      },
      WAIT_MS,
    );
    for (const k of gatewayKeys) assert.match(k, /^efk-/);
    await writeFile(plant, [UPSTREAM_KEY, ...gatewayKeys, TASK_ENV_KEY, AWS_ID].join(" "));

    await waitFor(
      "the run to finish",
      async () => ((await progressPhase(RUN)) === "finished" ? true : undefined),
      WAIT_MS,
    );
    await waitFor(
      "the attempts' keys to be withdrawn",
      async () => ((await attemptKeys()).length === 0 ? true : undefined),
      WAIT_MS,
    );

    // The real path ran: a fix graded, a crash recorded, model calls metered through the gateway.
    const rows = await store.db.query<{
      harness: string;
      status: string;
      grade_status: string | null;
      harness_stdout: string;
      harness_stderr: string;
      error_message: string | null;
    }>(
      "SELECT harness, status, grade_status, harness_stdout, harness_stderr, error_message FROM run_results WHERE run_name = $1 ORDER BY harness",
      [RUN],
    );
    const byHarness = new Map(rows.rows.map((r) => [r.harness, r]));
    assert.equal(byHarness.get("leak")?.status, "PATCH_READY", JSON.stringify(rows.rows));
    assert.equal(byHarness.get("leak")?.grade_status, "FULL");
    assert.equal(byHarness.get("crash")?.status, "HARNESS_ERROR");
    const ledger = await store.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM ledger_calls WHERE run_name = $1 AND status = 'ok'",
      [RUN],
    );
    assert.ok((ledger.rows[0]?.n ?? 0) >= 2, "each harness made a metered call");
    assert.ok(
      provider.calls().every((c) => c.key === UPSTREAM_KEY),
      "only the gateway's key went upstream",
    );
    // Redacted, not dropped: the output is still there to read.
    const leak = byHarness.get("leak")!;
    assert.match(leak.harness_stdout, /harness says: \[REDACTED\]/);
    assert.match(leak.harness_stdout, /Authorization: \[REDACTED\]/);
    assert.match(leak.harness_stdout, /model said:/);
    assert.match(byHarness.get("crash")!.harness_stderr, /fatal: crashing with \[REDACTED\]/);

    const secrets = [UPSTREAM_KEY, ...gatewayKeys, TASK_ENV_KEY, TASK_AWS_SECRET, BEARER, AWS_ID, CONFIG_KEY];
    const places = await everythingStored();
    assert.ok(places.some(([w]) => w.startsWith("blob ")) && places.some(([w]) => w.startsWith("kv ")));
    assert.ok(
      places.some(
        ([w, t]) => w.startsWith("blob ") && w.endsWith("trajectory.jsonl") && /key:\\n\[REDACTED\]/.test(t),
      ),
    );
    const leaks: string[] = [];
    for (const [where, text] of places)
      for (const s of secrets) {
        const at = text.indexOf(s);
        if (at >= 0) leaks.push(`${where}: …${text.slice(Math.max(0, at - 80), at + s.length + 20)}…`);
      }
    assert.deepEqual(leaks, [], `secrets landed:\n${leaks.join("\n")}`);
  });
});
