import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { saveTaskValidation } from "../../actors/grader-supervisor/records.js";
import { startPlanner } from "../../actors/planner/actor.js";
import type { Actor } from "../../actors/runtime/actor.js";
import { openPlane, type Plane } from "../../actors/runtime/connect.js";
import { silentLogger } from "../../protocol/log.js";
import { CellWorkSchema, type RunProgress } from "../../protocol/messages.js";
import { ProgressKeys, StateKeys, Subjects } from "../../protocol/subjects.js";
import { Streams } from "../../protocol/topology.js";
import { setCellStatus } from "../../store/results.js";
import { type FreshDb, freshDb } from "../helpers/db.js";
import { startNats, type TestNats } from "../helpers/nats.js";

let nats: TestNats;
let store: FreshDb;
let libDir: string;
const planes: Plane[] = [];
const actors: Actor[] = [];
let client: NatsConnection;

async function plane(name: string): Promise<Plane> {
  const p = await openPlane({ servers: nats.url, name });
  planes.push(p);
  return p;
}

function run(name: string, extra: Record<string, unknown> = {}) {
  return {
    name,
    harnesses: [
      { name: "h1", adapter: "command" },
      { name: "h2", adapter: "command" },
    ],
    models: [{ name: "m1" }, { name: "m2" }],
    tasks: ["*"],
    task_library_path: libDir,
    repeats: 2,
    ...extra,
  };
}

async function waitProgress(
  kv: KV,
  key: string,
  pred: (p: RunProgress) => boolean,
  ms = 15_000,
): Promise<RunProgress> {
  const deadline = Date.now() + ms;
  for (;;) {
    const e = await kv.get(key);
    if (e && e.length > 0) {
      const p = e.json<RunProgress>();
      if (pred(p)) return p;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${key}: ${e?.string()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

before(async () => {
  nats = await startNats();
  store = await freshDb("planner");
  libDir = await mkdtemp(join(tmpdir(), "ef-lib-"));
  for (const id of ["t1", "t2", "t3"]) await writeFile(join(libDir, `${id}.yaml`), `id: ${id}\ntrack: swe\n`);
  const p = await plane("planner-test");
  client = p.nc;
  for (let i = 0; i < 2; i++)
    actors.push(
      await startPlanner({ plane: await plane(`planner-${i}`), db: store.db, log: silentLogger() }),
    );
});

after(async () => {
  for (const a of actors) await a.stop();
  for (const p of planes) await p.close();
  await store.cleanup();
  await nats.cleanup();
  await rm(libDir, { recursive: true, force: true });
});

describe("planner", () => {
  it("plans a run sent as a raw core publish (no headers, no reply)", async () => {
    const p = planes[0]!;
    client.publish(Subjects.runSubmit, JSON.stringify(run("raw-json")));
    const prog = await waitProgress(
      p.kv.progress,
      ProgressKeys.run("raw-json"),
      (x) => x.phase === "planned",
    );
    assert.equal(prog.totalCells, 2 * 2 * 3 * 2);
    const rows = await store.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM run_state WHERE run_name = $1",
      ["raw-json"],
    );
    assert.equal(rows.rows[0]?.n, 24);
    const meta = await store.db.query("SELECT * FROM run_metadata WHERE run_name = $1", ["raw-json"]);
    assert.equal(meta.rowCount, 1);
    // The progress key is written before the cells are published: wait for them.
    let queued = 0;
    for (const deadline = Date.now() + 10_000; queued < 24 && Date.now() < deadline; ) {
      const info = await p.jsm.streams.info(Streams.cells.name, {
        subjects_filter: Subjects.cells.run("raw-json"),
      });
      queued = Object.values(info.state.subjects ?? {}).reduce((a, b) => a + b, 0);
      if (queued < 24) await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(queued, 24);
    const job = await p.kv.jobs.get("cell.raw-json.h1__m1__t1__r0");
    assert.equal(CellWorkSchema.parse(job?.json()).taskId, "t1");
    const key = (await p.kv.jobs.get(StateKeys.runKey("raw-json")))?.string() ?? "";
    assert.match(key, /^efk-/, "the run's gateway key is made at plan time");
    const stored = await store.db.query<{ key_hash: string }>(
      "SELECT key_hash FROM virtual_keys WHERE run_name = $1",
      ["raw-json"],
    );
    assert.equal(stored.rowCount, 1);
    assert.notEqual(stored.rows[0]?.key_hash, key, "only the hash is stored");
  });

  it("accepts YAML too", async () => {
    const p = planes[0]!;
    client.publish(
      Subjects.runSubmit,
      `name: raw-yaml\nharnesses: [{name: h, adapter: command}]\nmodels: [{name: m}]\ntasks: [t1]\ntask_library_path: ${libDir}\n`,
    );
    const prog = await waitProgress(
      p.kv.progress,
      ProgressKeys.run("raw-yaml"),
      (x) => x.phase === "planned",
    );
    assert.equal(prog.totalCells, 1);
  });

  it("rejects malformed runs with readable reasons and keeps serving", async () => {
    const p = planes[0]!;
    const bad: Array<[string, string | Uint8Array, RegExp]> = [
      [
        "wrong-types",
        JSON.stringify({ ...run("wrong-types"), repeats: "three", harnesses: "h1" }),
        /repeats/,
      ],
      ["neg-repeats", JSON.stringify(run("neg-repeats", { repeats: -1 })), /repeats: must be at least 1/],
      [
        "dup-names",
        JSON.stringify(
          run("dup-names", {
            harnesses: [
              { name: "h", adapter: "command" },
              { name: "h", adapter: "command" },
            ],
          }),
        ),
        /duplicate name "h"/,
      ],
      [
        "unknown-task",
        JSON.stringify(run("unknown-task", { tasks: ["t1", "nope"] })),
        /unknown task id "nope"/,
      ],
      [
        "bad-adapter",
        JSON.stringify({ ...run("bad-adapter"), harnesses: [{ name: "h", adapter: "bogus" }] }),
        /adapter/,
      ],
      // what used to crash the planner at JSON.stringify instead of rejecting
      [
        "too-deep",
        JSON.stringify(
          run("too-deep", { harnesses: [{ name: "h", adapter: "command", settings: { x: "DEEP" } }] }),
        ).replace('"DEEP"', `${"[".repeat(5000)}${"]".repeat(5000)}`),
        /harnesses\[0\]\.settings\.x.*: nested more than 32 levels/,
      ],
      [
        "self-ref",
        `name: self-ref\ntask_library_path: ${libDir}\ntasks: ["*"]\nmodels: [{name: m}]\nharnesses: [{name: h, adapter: command, settings: &s {again: *s}}]\n`,
        /refers to itself/,
      ],
      [
        "id-clash",
        JSON.stringify(
          run("id-clash", {
            harnesses: [
              { name: "a", adapter: "command" },
              { name: "a__b", adapter: "command" },
            ],
            models: [{ name: "b__c" }, { name: "c" }],
          }),
        ),
        /both make cell id a__b__c__t1__r0/,
      ],
    ];
    for (const [, body] of bad) client.publish(Subjects.runSubmit, body);
    for (const [name, , pattern] of bad) {
      const prog = await waitProgress(p.kv.progress, ProgressKeys.run(name), (x) => x.phase === "rejected");
      assert.match(prog.message, pattern, `${name}: ${prog.message}`);
      const cells = await store.db.query("SELECT 1 FROM run_state WHERE run_name = $1", [name]);
      assert.equal(cells.rowCount, 0, `${name} must persist nothing`);
    }
    // not JSON at all, and an oversized payload: no name to key on, so they land under rejected.<seq>
    client.publish(Subjects.runSubmit, "{ this is not json");
    client.publish(Subjects.runSubmit, new Uint8Array(300 * 1024).fill(0x20));
    const seen: string[] = [];
    const deadline = Date.now() + 10_000;
    while (seen.length < 2 && Date.now() < deadline) {
      seen.length = 0;
      for await (const k of await p.kv.progress.keys("rejected.*")) {
        const e = await p.kv.progress.get(k);
        seen.push(e?.string() ?? "");
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(
      seen.some((s) => /not valid JSON/.test(s)),
      seen.join("\n"),
    );
    assert.ok(
      seen.some((s) => /limit is 262144/.test(s)),
      seen.join("\n"),
    );
    // still serving
    client.publish(Subjects.runSubmit, JSON.stringify(run("after-bad")));
    await waitProgress(p.kv.progress, ProgressKeys.run("after-bad"), (x) => x.phase === "planned");
  });

  it("two replicas plan a burst of 50 runs, each exactly once", async () => {
    const p = planes[0]!;
    for (let i = 0; i < 50; i++) client.publish(Subjects.runSubmit, JSON.stringify(run(`burst-${i}`)));
    for (let i = 0; i < 50; i++)
      await waitProgress(p.kv.progress, ProgressKeys.run(`burst-${i}`), (x) => x.phase === "planned", 30_000);
    // The accepted event follows the progress key: wait until every run's event is in, then look for doubles.
    let perRun: Array<[string, number]> = [];
    const deadline = Date.now() + 15_000;
    do {
      const ev = await p.jsm.streams.info(Streams.events.name, { subjects_filter: "events.>" });
      perRun = Object.entries(ev.state.subjects ?? {}).filter(([s]) => s.startsWith("events.burst-"));
      if (perRun.length < 50) await new Promise((r) => setTimeout(r, 100));
    } while (perRun.length < 50 && Date.now() < deadline);
    await new Promise((r) => setTimeout(r, 300));
    const ev = await p.jsm.streams.info(Streams.events.name, { subjects_filter: "events.>" });
    perRun = Object.entries(ev.state.subjects ?? {}).filter(([s]) => s.startsWith("events.burst-"));
    assert.equal(perRun.length, 50);
    assert.ok(
      perRun.every(([, n]) => n === 1),
      "exactly one accepted event per run",
    );
    const r = await store.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM run_state WHERE run_name LIKE 'burst-%'",
    );
    assert.equal(r.rows[0]?.n, 50 * 24);
    const info = await p.jsm.streams.info(Streams.runs.name);
    assert.equal(info.state.messages, 0, "work queue drained: every submission acked once");
    const handled = await Promise.all(
      actors.map(async (a) =>
        (await p.kv.progress.get(ProgressKeys.actor("planner", a.id)))?.json<{ handled: number }>(),
      ),
    );
    assert.ok(handled.length === 2);
  });

  it("resubmitting a run resumes it: completed cells are skipped", async () => {
    const p = planes[0]!;
    client.publish(Subjects.runSubmit, JSON.stringify(run("resume-me")));
    await waitProgress(p.kv.progress, ProgressKeys.run("resume-me"), (x) => x.phase === "planned");
    await setCellStatus(store.db, "resume-me", "h1__m1__t1__r0", "completed");
    await setCellStatus(store.db, "resume-me", "h1__m1__t1__r1", "completed");
    client.publish(Subjects.runSubmit, JSON.stringify(run("resume-me")));
    const prog = await waitProgress(p.kv.progress, ProgressKeys.run("resume-me"), (x) => x.completed === 2);
    assert.equal(prog.pending, 22);
    assert.match(prog.message, /resumed: 22 of 24 cells queued, 2 already completed/);
  });

  it("leaves out tasks that gold validation marked invalid", async () => {
    const p = planes[0]!;
    await saveTaskValidation(store.db, {
      taskId: "t3",
      valid: false,
      reason: "gold patch does not resolve",
      imageDigest: null,
    });
    try {
      client.publish(Subjects.runSubmit, JSON.stringify(run("skip-invalid")));
      const prog = await waitProgress(
        p.kv.progress,
        ProgressKeys.run("skip-invalid"),
        (x) => x.phase === "planned",
      );
      assert.equal(prog.totalCells, 2 * 2 * 2 * 2);
    } finally {
      await store.db.query("DELETE FROM task_validation WHERE task_id = 't3'");
    }
  });
});
