/** The judge end to end: real nats-server, the scripted provider as the judge model's upstream. */
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { Subscription } from "@nats-io/transport-node";
import { startJudge } from "../../actors/judge/actor.js";
import { loadTaskLibrary } from "../../actors/planner/library.js";
import type { Actor } from "../../actors/runtime/actor.js";
import { openPlane, type Plane } from "../../actors/runtime/connect.js";
import type { RunConfigInput } from "../../protocol/config.js";
import { silentLogger } from "../../protocol/log.js";
import { type JudgeJob, type LedgerCall, MessageTypes, type Verdict } from "../../protocol/messages.js";
import { BlobNames, StateKeys, Subjects } from "../../protocol/subjects.js";
import { Consumers } from "../../protocol/topology.js";
import { type ScriptedProvider, startScriptedProvider } from "../../scripts/scripted-provider/index.js";
import { type FreshDb, freshDb } from "../helpers/db.js";
import { startNats, type TestNats } from "../helpers/nats.js";

const LIBRARY = path.resolve(import.meta.dirname, "../../examples/tasks");
const JUDGE_KEY = "sk-judge-own-key";
const TASK = "sample-explain-design";

let nats: TestNats;
let plane: Plane;
let fdb: FreshDb;
let provider: ScriptedProvider;
let actor: Actor;
const subs: Subscription[] = [];
const verdicts = new Map<string, Verdict>();
const ledger: LedgerCall[] = [];
const waiters = new Map<string, (v: Verdict) => void>();

function waitVerdict(cellId: string, timeoutMs = 30_000): Promise<Verdict> {
  const have = verdicts.get(cellId);
  if (have) return Promise.resolve(have);
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`no verdict for ${cellId}`)), timeoutMs);
    waiters.set(cellId, (v) => {
      clearTimeout(t);
      resolve(v);
    });
  });
}

async function putRun(run: string, judge: "claude" | "gpt"): Promise<void> {
  const config: RunConfigInput = {
    name: run,
    harnesses: [{ name: "reference", adapter: "reference" }],
    models: [
      {
        name: "claude-sonnet-4-5",
        provider: "anthropic",
        prices: {
          input_per_mtok: 3,
          output_per_mtok: 15,
          cache_read_per_mtok: 0.3,
          cache_write_per_mtok: 3.75,
        },
      },
      { name: "gpt-5-mini", provider: "openai" },
    ],
    tasks: ["*"],
    task_library_path: LIBRARY,
    judge: { model: judge === "claude" ? "claude-sonnet-4-5" : "gpt-5-mini" },
  };
  await plane.kv.jobs.put(StateKeys.jobRun(run), JSON.stringify(config));
  const library = await loadTaskLibrary(LIBRARY);
  await plane.kv.jobs.put(StateKeys.jobTask(run, TASK), JSON.stringify(library.tasks.get(TASK)));
}

async function submit(run: string, cellId: string): Promise<void> {
  const trajectoryRef = BlobNames.attempt(run, cellId, 1, "trajectory.jsonl");
  const patchRef = BlobNames.attempt(run, cellId, 1, "patch.diff");
  const enc = new TextEncoder();
  await plane.blobs.putBlob(
    { name: trajectoryRef },
    enc.encode('{"role":"assistant","content":"I wrote NOTES.md proposing mul and div"}\n'),
  );
  await plane.blobs.putBlob({ name: patchRef }, enc.encode("diff --git a/NOTES.md b/NOTES.md\n+mul, div\n"));
  const job: JudgeJob = {
    type: MessageTypes.judgeJob,
    run,
    cellId,
    attempt: 1,
    taskId: TASK,
    trajectoryRef,
    patchRef,
  };
  await plane.js.publish(Subjects.judgeJobs.one(run), JSON.stringify(job), {
    msgID: `${run}/${cellId}/1/judge`,
  });
}

before(async () => {
  nats = await startNats();
  plane = await openPlane({ servers: nats.url, name: "judge-test" });
  fdb = await freshDb("judge");
  provider = await startScriptedProvider({ keys: [JUDGE_KEY] });
  await putRun("judged", "claude");
  await putRun("judged-gpt", "gpt");
  const vs = plane.nc.subscribe(Subjects.judgeResults.all);
  const ls = plane.nc.subscribe(Subjects.ledger.all);
  subs.push(vs, ls);
  void (async () => {
    for await (const m of vs) {
      const v = m.json<Verdict>();
      verdicts.set(v.cellId, v);
      waiters.get(v.cellId)?.(v);
    }
  })();
  void (async () => {
    for await (const m of ls) ledger.push(m.json<LedgerCall>());
  })();
  actor = await startJudge({
    plane,
    db: fdb.db,
    log: silentLogger(),
    gatewayUrl: provider.url,
    judgeKey: JUDGE_KEY,
    retryBaseDelayMs: 10,
  });
});

after(async () => {
  await actor?.drain(5_000);
  for (const s of subs) s.unsubscribe();
  await plane?.close();
  await provider?.close();
  await fdb?.cleanup();
  await nats?.cleanup();
});

describe("judge", () => {
  it("scores an open_ended attempt with the rubric, under the judge's key, and bills the run", async () => {
    provider.setScenario({
      text: 'Here is my assessment:\n```json\n{"score": 0.5, "rationale": "mul and div proposed; no zero case"}\n```',
    });
    const before = provider.calls().length;
    await submit("judged", "cell-a");
    const v = await waitVerdict("cell-a");
    assert.equal(v.score, 0.5);
    assert.equal(v.rationale, "mul and div proposed; no zero case");
    assert.equal(v.judgeModel, "claude-sonnet-4-5");

    const calls = provider.calls().slice(before);
    assert.equal(calls.length, 1);
    const call = calls[0]!;
    assert.equal(call.key, JUDGE_KEY);
    assert.equal(call.path, "/v1/messages");
    assert.equal(call.model, "claude-sonnet-4-5");
    const body = JSON.stringify(call.body);
    assert.match(body, /handles division by zero/, "the rubric is in the prompt");
    assert.match(body, /I wrote NOTES.md proposing mul and div/, "the trajectory is in the prompt");

    // The cost is exact: what the provider billed, in the verdict and in exactly one ledger message.
    assert.ok(v.costNanoUsd > 0);
    assert.equal(v.costNanoUsd, call.costNanoUsd);
    const mine = ledger.filter((l) => l.cellId === "cell-a");
    assert.equal(mine.length, 1);
    const l = mine[0]!;
    assert.equal(l.costMode, "platform");
    assert.equal(l.costNanoUsd, call.costNanoUsd);
    assert.equal(l.status, "ok");
    assert.equal(l.run, "judged");
    assert.equal(l.pool, "judge__claude-sonnet-4-5");
    assert.equal(l.traceId, "cell-a__judge");
  });

  it("retries an overloaded judge; the failed call is in the ledger at zero cost", async () => {
    provider.setScenario([
      { error: { status: 529 } },
      { text: '{"score": 1, "rationale": "complete, zero case handled"}' },
    ]);
    const before = provider.calls().length;
    await submit("judged", "cell-b");
    const v = await waitVerdict("cell-b");
    assert.equal(v.score, 1);
    const calls = provider.calls().slice(before);
    assert.equal(calls.length, 2);
    const mine = ledger.filter((l) => l.cellId === "cell-b");
    assert.deepEqual(
      mine.map((l) => [l.status, l.retries]),
      [
        ["overloaded", 0],
        ["ok", 1],
      ],
    );
    assert.equal(mine[0]?.costNanoUsd, 0);
    assert.equal(v.costNanoUsd, calls[1]?.costNanoUsd);
  });

  it("asks again when the answer has no score, and both calls are billed", async () => {
    provider.setScenario([
      { text: "I think it is decent." },
      { text: '{"score": "70%", "rationale": "ok"}' },
    ]);
    const before = provider.calls().length;
    await submit("judged", "cell-c");
    const v = await waitVerdict("cell-c");
    assert.equal(v.score, 0.7);
    const calls = provider.calls().slice(before);
    assert.equal(calls.length, 2);
    assert.equal(v.costNanoUsd, (calls[0]?.costNanoUsd ?? 0) + (calls[1]?.costNanoUsd ?? 0));
    assert.equal(ledger.filter((l) => l.cellId === "cell-c").length, 2);
  });

  it("an attempt whose verdict already landed is not judged (or paid for) again", async () => {
    await fdb.db.query(
      "INSERT INTO run_results (run_name, cell_id, attempt, verdict_score, verdict) VALUES ($1, $2, 1, 1, $3)",
      ["judged", "cell-landed", JSON.stringify({ score: 1 })],
    );
    const before = provider.calls().length;
    await submit("judged", "cell-landed");
    const { stream, durable } = Consumers.judge;
    for (let i = 0; ; i++) {
      const info = await plane.jsm.consumers.info(stream, durable);
      if (info.num_pending === 0 && info.num_ack_pending === 0) break;
      assert.ok(i < 200, "the judge job was never acked");
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(provider.calls().length, before);
    assert.equal(verdicts.has("cell-landed"), false);
  });

  it("an OpenAI judge model is called on chat completions", async () => {
    provider.setScenario({ text: '{"score": 0, "rationale": "NOTES.md missing"}' });
    const before = provider.calls().length;
    await submit("judged-gpt", "cell-d");
    const v = await waitVerdict("cell-d");
    assert.equal(v.score, 0);
    assert.equal(v.judgeModel, "gpt-5-mini");
    const call = provider.calls().slice(before)[0];
    assert.equal(call?.path, "/v1/chat/completions");
    assert.equal(call?.key, JUDGE_KEY);
    const l = ledger.find((x) => x.cellId === "cell-d");
    assert.equal(l?.endpoint, "chat_completions");
    assert.equal(l?.provider, "openai");
    assert.equal(l?.costNanoUsd, call?.costNanoUsd);
  });
});
