import assert from "node:assert/strict";
import { rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import { handleSubmission, startPlanner } from "../../actors/planner/actor.js";
import { Actor } from "../../actors/runtime/actor.js";
import { silentLogger } from "../../lib/log.js";
import type { Plane } from "../../plane/connect.js";
import { TaskSpecSchema, taskSpecHash } from "../../protocol/config.js";
import { CellWorkSchema, type RunProgress } from "../../protocol/messages.js";
import { ProgressKeys, StateKeys, Subjects } from "../../protocol/subjects.js";
import { Streams } from "../../protocol/topology.js";
import { saveTaskValidation } from "../../store/grades.js";
import { setCellStatus } from "../../store/results.js";
import { type PlaneRig, startPlaneRig } from "../helpers/plane-rig.js";
import { runEvalfleet } from "../helpers/proc.js";

let rig: PlaneRig;
let testPlane: Plane;
const planners: Actor[] = [];
let client: NatsConnection;

/** Command harnesses and priced models of these names, as a run config lists them. */
const harnesses = (...names: string[]) => names.map((name) => ({ name, adapter: "command" }));
const models = (...names: string[]) =>
  names.map((name) => ({ name, prices: { input_per_mtok: 1, output_per_mtok: 2 } }));

function run(name: string, extra: Record<string, unknown> = {}) {
  return {
    name,
    harnesses: harnesses("h1", "h2"),
    models: models("m1", "m2"),
    tasks: ["*"],
    task_library_path: rig.libDir,
    repeats: 2,
    // t1..t3 are stand-ins with nothing to grade; the validation gate has its own tests below
    unvalidated: true,
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
  rig = await startPlaneRig("planner", { tasks: ["t1", "t2", "t3"].map((id) => ({ id })) });
  testPlane = await rig.plane("planner-test");
  client = testPlane.nc;
  for (let i = 0; i < 2; i++)
    planners.push(
      rig.adopt(
        await startPlanner({
          plane: await rig.plane(`planner-${i}`),
          db: rig.store.db,
          log: silentLogger(),
          libraryRoots: [rig.libDir],
        }),
      ),
    );
});

after(async () => {
  await rig.close();
});

describe("planner", () => {
  it("plans a run sent as a raw core publish (no headers, no reply)", async () => {
    const p = testPlane;
    client.publish(Subjects.runSubmit, JSON.stringify(run("raw-json")));
    const prog = await waitProgress(
      p.kv.progress,
      ProgressKeys.run("raw-json"),
      (x) => x.phase === "planned",
    );
    assert.equal(prog.totalCells, 2 * 2 * 3 * 2);
    const rows = await rig.store.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM run_state WHERE run_name = $1",
      ["raw-json"],
    );
    assert.equal(rows.rows[0]?.n, 24);
    const meta = await rig.store.db.query("SELECT * FROM run_metadata WHERE run_name = $1", ["raw-json"]);
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
    // No run-wide gateway key: each attempt gets its own when the dispatcher launches it.
    const stored = await rig.store.db.query("SELECT 1 FROM virtual_keys WHERE run_name = $1", ["raw-json"]);
    assert.equal(stored.rowCount, 0, "the planner mints no gateway key");
    const keys: string[] = [];
    for await (const k of await p.kv.jobs.keys("key.>")) keys.push(k);
    assert.deepEqual(keys, [], "and leaves none in the jobs bucket");
  });

  it("accepts YAML too", async () => {
    const p = testPlane;
    client.publish(
      Subjects.runSubmit,
      `name: raw-yaml\nharnesses: [{name: h, adapter: command}]\nmodels: [{name: m, prices: {input_per_mtok: 1, output_per_mtok: 2}}]\ntasks: [t1]\ntask_library_path: ${rig.libDir}\nunvalidated: true\n`,
    );
    const prog = await waitProgress(
      p.kv.progress,
      ProgressKeys.run("raw-yaml"),
      (x) => x.phase === "planned",
    );
    assert.equal(prog.totalCells, 1);
  });

  it("rejects malformed runs with readable reasons and keeps serving", async () => {
    const p = testPlane;
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
            harnesses: harnesses("h", "h"),
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
        `name: self-ref\ntask_library_path: ${rig.libDir}\ntasks: ["*"]\nmodels: [{name: m, prices: {input_per_mtok: 1, output_per_mtok: 2}}]\nharnesses: [{name: h, adapter: command, settings: &s {again: *s}}]\n`,
        /refers to itself/,
      ],
      [
        "id-clash",
        JSON.stringify(
          run("id-clash", {
            harnesses: harnesses("a", "a__b"),
            models: models("b__c", "c"),
          }),
        ),
        /both make cell id a__b__c__t1__r0/,
      ],
    ];
    for (const [, body] of bad) client.publish(Subjects.runSubmit, body);
    for (const [name, , pattern] of bad) {
      const prog = await waitProgress(p.kv.progress, ProgressKeys.run(name), (x) => x.phase === "rejected");
      assert.match(prog.message, pattern, `${name}: ${prog.message}`);
      const cells = await rig.store.db.query("SELECT 1 FROM run_state WHERE run_name = $1", [name]);
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
    const p = testPlane;
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
    const r = await rig.store.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM run_state WHERE run_name LIKE 'burst-%'",
    );
    assert.equal(r.rows[0]?.n, 50 * 24);
    const info = await p.jsm.streams.info(Streams.runs.name);
    assert.equal(info.state.messages, 0, "work queue drained: every submission acked once");
    const handled = await Promise.all(
      planners.map(async (a) =>
        (await p.kv.progress.get(ProgressKeys.actor("planner", a.id)))?.json<{ handled: number }>(),
      ),
    );
    assert.ok(handled.length === 2);
  });

  it("resubmitting a run resumes it: completed cells are skipped", async () => {
    const p = testPlane;
    client.publish(Subjects.runSubmit, JSON.stringify(run("resume-me")));
    await waitProgress(p.kv.progress, ProgressKeys.run("resume-me"), (x) => x.phase === "planned");
    await setCellStatus(rig.store.db, "resume-me", "h1__m1__t1__r0", "completed");
    await setCellStatus(rig.store.db, "resume-me", "h1__m1__t1__r1", "completed");
    client.publish(Subjects.runSubmit, JSON.stringify(run("resume-me")));
    const prog = await waitProgress(p.kv.progress, ProgressKeys.run("resume-me"), (x) => x.completed === 2);
    assert.equal(prog.pending, 22);
    // The seed's counters: cells an earlier submission completed are skipped, not completed again.
    assert.deepEqual(prog.seed, { completed: 0, failed: 0, skipped: 2 });
    assert.equal(prog.alreadyCompleted, 2);
    assert.match(prog.message, /resumed: 22 of 24 cells queued, 2 already completed/);
  });

  it("a redelivered submission (the planner died before its ack) is planned as what it was, not as a resume", async () => {
    const p = testPlane;
    client.publish(Subjects.runSubmit, JSON.stringify(run("redelivered")));
    const first = await waitProgress(
      p.kv.progress,
      ProgressKeys.run("redelivered"),
      (x) => x.phase === "planned",
    );
    assert.equal(first.resumed, false);
    assert.ok(first.submissionSeq !== undefined);
    // Cells of this very submission completed before the planner died; then the same message comes back.
    await setCellStatus(rig.store.db, "redelivered", "h1__m1__t1__r0", "completed");
    const actor = new Actor("planner", p, silentLogger());
    const again = await handleSubmission(
      { plane: p, db: rig.store.db, log: silentLogger(), libraryRoots: [rig.libDir] },
      actor,
      new TextEncoder().encode(JSON.stringify(run("redelivered"))),
      first.submissionSeq!,
    );
    assert.equal(again.kind === "planned" && again.resumed, false, "not a resume of itself");
    const prog = await waitProgress(p.kv.progress, ProgressKeys.run("redelivered"), (x) => x.pending === 23);
    assert.equal(prog.alreadyCompleted, 0, "a cell it completed itself is not an earlier submission's");
    assert.deepEqual(prog.seed, { completed: 0, failed: 0, skipped: 0 });
    assert.match(prog.message, /^planned: 23 of 24 cells queued/);
  });

  it("a resubmission with another config is refused with every difference; budget and concurrency may change", async () => {
    const p = testPlane;
    const name = "resume-strict";
    const events = client.subscribe(Subjects.events.run(name));
    const verdicts: Array<{
      kind: string;
      message: string;
      issues?: Array<{ path: string; reason: string }>;
    }> = [];
    const reading = (async () => {
      for await (const m of events) {
        const ev = m.json<{
          kind: string;
          message: string;
          issues?: Array<{ path: string; reason: string }>;
        }>();
        if (["accepted", "resumed", "rejected"].includes(ev.kind)) verdicts.push(ev);
      }
    })();
    const next = async (n: number) => {
      const deadline = Date.now() + 15_000;
      while (verdicts.length < n && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      assert.equal(verdicts.length, n, "a verdict arrives");
      return verdicts[n - 1]!;
    };
    client.publish(Subjects.runSubmit, JSON.stringify(run(name, { max_turns: 10 })));
    assert.equal((await next(1)).kind, "accepted");
    await setCellStatus(rig.store.db, name, "h1__m1__t1__r0", "completed");

    const changed = run(name, {
      max_turns: 20,
      repeats: 3,
      models: [{ name: "m1", prices: { input_per_mtok: 9, output_per_mtok: 9 } }, ...models("m2")],
    });
    client.publish(Subjects.runSubmit, JSON.stringify(changed));
    const refused = await next(2);
    assert.equal(refused.kind, "rejected");
    assert.match(refused.message, /already exists with a different config/);
    assert.match(refused.message, /may change only budget_usd and parallel_runs/);
    assert.match(refused.message, /evalfleet resume resume-strict/);
    assert.match(refused.message, /--name NEW/);
    const paths = (refused.issues ?? []).map((i) => i.path);
    assert.ok(paths.includes("max_turns"), paths.join(", "));
    assert.ok(paths.includes("repeats"), paths.join(", "));
    assert.ok(
      paths.some((x) => x.startsWith("models[0].prices")),
      paths.join(", "),
    );
    assert.match(refused.issues!.find((i) => i.path === "max_turns")!.reason, /stored 10, submitted 20/);
    // The stored config and the live progress are untouched.
    const stored = await rig.store.db.query<{ config_json: string }>(
      "SELECT config_json FROM run_metadata WHERE run_name = $1",
      [name],
    );
    assert.equal((JSON.parse(stored.rows[0]!.config_json) as { max_turns: number }).max_turns, 10);
    const prog = await waitProgress(p.kv.progress, ProgressKeys.run(name), () => true);
    assert.equal(prog.phase, "planned");

    // The remedy the rejection prints: the same file under a new name is a new run.
    const file = join(rig.libDir, "..", `${name}-${process.pid}.json`);
    await writeFile(file, JSON.stringify(changed));
    const renamed = await runEvalfleet(
      ["submit", file, "--name", `${name}-v2`, "--no-check-gateway", "--json", "--timeout-ms", "20000"],
      { ...rig.nats.env },
    );
    const bad = await runEvalfleet(["submit", file, "--name", "../x", "--no-check-gateway"], {
      ...rig.nats.env,
    });
    await rm(file, { force: true });
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--name "..\/x" is not a valid run name/);
    assert.equal(renamed.code, 0, renamed.stderr + renamed.stdout);
    const verdict = JSON.parse(renamed.stdout) as { kind: string; run: string };
    assert.deepEqual([verdict.kind, verdict.run], ["accepted", `${name}-v2`]);
    const v2 = await waitProgress(
      p.kv.progress,
      ProgressKeys.run(`${name}-v2`),
      (x) => x.phase === "planned",
    );
    assert.equal(v2.totalCells, 2 * 2 * 3 * 3, "the new run has the changed config (3 repeats)");

    // Only budget and concurrency changed: the same run resumes, with them updated.
    client.publish(
      Subjects.runSubmit,
      JSON.stringify(run(name, { max_turns: 10, budget_usd: 7, parallel_runs: 9 })),
    );
    const resumed = await next(3);
    assert.equal(resumed.kind, "resumed", resumed.message);
    const after = await rig.store.db.query<{ config_json: string }>(
      "SELECT config_json FROM run_metadata WHERE run_name = $1",
      [name],
    );
    const cfg = JSON.parse(after.rows[0]!.config_json) as { budget_usd: number; parallel_runs: number };
    assert.deepEqual([cfg.budget_usd, cfg.parallel_runs], [7, 9]);
    events.unsubscribe();
    await reading;
  });

  it("task_library_path resolves under the library roots; a path outside them is refused with the roots", async () => {
    const p = testPlane;
    client.publish(Subjects.runSubmit, JSON.stringify(run("relative-lib", { task_library_path: "." })));
    const ok = await waitProgress(
      p.kv.progress,
      ProgressKeys.run("relative-lib"),
      (x) => x.phase === "planned",
    );
    assert.equal(ok.totalCells, 24);
    client.publish(Subjects.runSubmit, JSON.stringify(run("escape-lib", { task_library_path: "/etc" })));
    const bad = await waitProgress(
      p.kv.progress,
      ProgressKeys.run("escape-lib"),
      (x) => x.phase === "rejected",
    );
    assert.match(bad.message, /task library "\/etc" is refused/);
    assert.match(bad.message, new RegExp(`the task library roots are: ${rig.libDir}`));
  });

  describe("the gold-validation gate", () => {
    const spec = (id: string) => TaskSpecSchema.parse({ id, track: "swe" });
    const valid = (id: string) =>
      saveTaskValidation(rig.store.db, {
        taskId: id,
        valid: true,
        reason: null,
        imageDigest: null,
        backend: "local",
        taskHash: taskSpecHash(spec(id)),
      });
    const gated = (name: string, extra: Record<string, unknown> = {}) =>
      JSON.stringify(run(name, { unvalidated: undefined, ...extra }));
    const rejected = async (name: string) => {
      const prog = await waitProgress(
        testPlane.kv.progress,
        ProgressKeys.run(name),
        (x) => x.phase === "rejected",
      );
      const cells = await rig.store.db.query("SELECT 1 FROM run_state WHERE run_name = $1", [name]);
      assert.equal(cells.rowCount, 0, `${name} must persist nothing`);
      return prog;
    };
    after(async () => {
      await rig.store.db.query("DELETE FROM task_validation WHERE task_id IN ('t1', 't2', 't3')");
    });

    it("refuses a run on tasks never validated, listing each with what to do", async () => {
      client.publish(Subjects.runSubmit, gated("gate-none"));
      const prog = await rejected("gate-none");
      assert.match(prog.message, /3 of the run's 3 task\(s\) are not gold-validated/);
      assert.match(prog.message, /--unvalidated/);
      for (const id of ["t1", "t2", "t3"])
        assert.ok(
          prog.issues?.some(
            (i) => i.path === `tasks: ${id}` && /not validated: .*evalfleet validate-env/.test(i.reason),
          ),
          JSON.stringify(prog.issues),
        );
    });

    it("an explicitly listed invalid task is a rejection with its reason, never a silent drop", async () => {
      await valid("t1");
      await valid("t2");
      await saveTaskValidation(rig.store.db, {
        taskId: "t3",
        valid: false,
        reason: "gold patch does not resolve the task: RESOLVED_NO",
        imageDigest: null,
        taskHash: taskSpecHash(spec("t3")),
      });
      client.publish(Subjects.runSubmit, gated("gate-invalid", { tasks: ["t1", "t3"] }));
      const prog = await rejected("gate-invalid");
      assert.deepEqual(
        prog.issues?.map((i) => i.path),
        ["tasks: t3"],
      );
      assert.match(
        prog.issues?.[0]?.reason ?? "",
        /^invalid \(validated .*\): gold patch does not resolve the task: RESOLVED_NO$/,
      );
      // "*" selects it too: refused as well, not planned without it.
      client.publish(Subjects.runSubmit, gated("gate-star-invalid"));
      await rejected("gate-star-invalid");
    });

    it("a task changed since its validation must be validated again", async () => {
      await saveTaskValidation(rig.store.db, {
        taskId: "t3",
        valid: true,
        reason: null,
        imageDigest: null,
        taskHash: "0".repeat(64),
      });
      client.publish(Subjects.runSubmit, gated("gate-changed"));
      const prog = await rejected("gate-changed");
      assert.match(prog.issues?.[0]?.reason ?? "", /changed since it was validated/);
    });

    it("plans a run whose tasks are all validated; --unvalidated runs the rest, and says so", async () => {
      await valid("t3");
      // t1 as a SWE-bench task validated in a mirror: the spec its attempts and grades fetch names that digest.
      const mirror = `127.0.0.1:5000/swebench/sweb.eval.x86_64.t1@sha256:${"ab".repeat(32)}`;
      await saveTaskValidation(rig.store.db, {
        taskId: "t1",
        valid: true,
        reason: null,
        imageDigest: `sha256:${"ab".repeat(32)}`,
        imageRef: mirror,
        backend: "docker",
        taskHash: taskSpecHash(spec("t1")),
      });
      client.publish(Subjects.runSubmit, gated("gate-ok"));
      const ok = await waitProgress(
        testPlane.kv.progress,
        ProgressKeys.run("gate-ok"),
        (x) => x.phase === "planned",
      );
      assert.equal(ok.totalCells, 2 * 2 * 3 * 2);
      assert.doesNotMatch(ok.message, /UNVALIDATED/);
      const t1 = await testPlane.kv.jobs.get(StateKeys.jobTask("gate-ok", "t1"));
      assert.equal(t1?.json<{ image?: string }>().image, mirror);
      const t2 = await testPlane.kv.jobs.get(StateKeys.jobTask("gate-ok", "t2"));
      assert.equal(t2?.json<{ image?: string }>().image, undefined, "validated in a checkout: no image");
      await rig.store.db.query("DELETE FROM task_validation WHERE task_id = 't2'");
      client.publish(Subjects.runSubmit, gated("gate-anyway", { unvalidated: true }));
      const anyway = await waitProgress(
        testPlane.kv.progress,
        ProgressKeys.run("gate-anyway"),
        (x) => x.phase === "planned",
      );
      assert.equal(anyway.totalCells, 2 * 2 * 3 * 2, "every selected task runs");
      assert.match(anyway.message, /UNVALIDATED \(--unvalidated\): 1 task\(s\) not gold-validated: t2/);
      const stored = await rig.store.db.query<{ config_json: string }>(
        "SELECT config_json FROM run_metadata WHERE run_name = 'gate-anyway'",
      );
      assert.equal(
        (JSON.parse(stored.rows[0]?.config_json ?? "{}") as { unvalidated?: boolean }).unvalidated,
        true,
      );
    });
  });
});
