/** The judge end to end: real nats-server, the scripted provider as the judge model's upstream. */
import assert from "node:assert/strict";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { Subscription } from "@nats-io/transport-node";
import { startJudge } from "../../actors/judge/actor.js";
import { loadTaskLibrary } from "../../actors/planner/library.js";
import type { Actor } from "../../actors/runtime/actor.js";
import { type Gateway, startGateway } from "../../gateway/server.js";
import { silentLogger } from "../../lib/log.js";
import { openPlane, type Plane } from "../../plane/connect.js";
import type { RunConfigInput } from "../../protocol/config.js";
import { MsgIds } from "../../protocol/ids.js";
import { type JudgeJob, type LedgerCall, MessageTypes, type Verdict } from "../../protocol/messages.js";
import { BlobNames, StateKeys, Subjects } from "../../protocol/subjects.js";
import { Consumers } from "../../protocol/topology.js";
import { type ScriptedProvider, startScriptedProvider } from "../../scripted-provider/index.js";
import { revokeRunKeys } from "../../store/keys.js";
import { type ByCell, collectByCell } from "../helpers/by-cell.js";
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
let verdicts: ByCell<Verdict>;
const ledger: LedgerCall[] = [];

async function putRun(run: string, judge: "claude" | "gpt", budgetUsd?: number): Promise<void> {
  const config: RunConfigInput = {
    name: run,
    ...(budgetUsd === undefined ? {} : { budget_usd: budgetUsd }),
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
    patch: null,
  };
  await plane.js.publish(Subjects.judgeJobs.one(run), JSON.stringify(job), {
    msgID: MsgIds.judgeJob(run, cellId, 1),
  });
}

/** Judges one cell of `run` with the provider answering `scenario`: its verdict and the provider calls it took. */
async function judgeCell(
  run: string,
  cellId: string,
  scenario: Parameters<ScriptedProvider["setScenario"]>[0],
): Promise<{ v: Verdict; calls: ReturnType<ScriptedProvider["calls"]> }> {
  provider.setScenario(scenario);
  const before = provider.calls().length;
  await submit(run, cellId);
  const v = await verdicts.wait(cellId);
  return { v, calls: provider.calls().slice(before) };
}

before(async () => {
  nats = await startNats();
  plane = await openPlane({ nats: nats.settings, name: "judge-test" });
  fdb = await freshDb("judge");
  provider = await startScriptedProvider({ keys: [JUDGE_KEY] });
  await putRun("judged", "claude");
  await putRun("judged-gpt", "gpt");
  verdicts = collectByCell<Verdict>(plane.nc, Subjects.judgeResults.all, "verdict");
  const ls = plane.nc.subscribe(Subjects.ledger.all);
  subs.push(ls);
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
  verdicts?.stop();
  for (const s of subs) s.unsubscribe();
  await plane?.close();
  await provider?.close();
  await fdb?.cleanup();
  await nats?.cleanup();
});

describe("judge", () => {
  it("scores an open_ended attempt with the rubric, under the judge's key, and bills the run", async () => {
    const { v, calls } = await judgeCell("judged", "cell-a", {
      text: 'Here is my assessment:\n```json\n{"score": 0.5, "rationale": "mul and div proposed; no zero case"}\n```',
    });
    assert.equal(v.score, 0.5);
    assert.equal(v.rationale, "mul and div proposed; no zero case");
    assert.equal(v.judgeModel, "claude-sonnet-4-5");

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
    assert.equal(l.pool, "claude-sonnet-4-5");
    assert.equal(l.traceId, "cell-a__judge");
  });

  it("retries an overloaded judge; the failed call is in the ledger at zero cost", async () => {
    const { v, calls } = await judgeCell("judged", "cell-b", [
      { error: { status: 529 } },
      { text: '{"score": 1, "rationale": "complete, zero case handled"}' },
    ]);
    assert.equal(v.score, 1);
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
    const { v, calls } = await judgeCell("judged", "cell-c", [
      { text: "I think it is decent." },
      { text: '{"score": "70%", "rationale": "ok"}' },
    ]);
    assert.equal(v.score, 0.7);
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
    assert.equal(verdicts.seen.has("cell-landed"), false);
  });

  it("an OpenAI judge model is called on chat completions", async () => {
    const { v, calls } = await judgeCell("judged-gpt", "cell-d", {
      text: '{"score": 0, "rationale": "NOTES.md missing"}',
    });
    assert.equal(v.score, 0);
    assert.equal(v.judgeModel, "gpt-5-mini");
    const call = calls[0];
    assert.equal(call?.path, "/v1/chat/completions");
    assert.equal(call?.key, JUDGE_KEY);
    const l = ledger.find((x) => x.cellId === "cell-d");
    assert.equal(l?.endpoint, "chat_completions");
    assert.equal(l?.provider, "openai");
    assert.equal(l?.costNanoUsd, call?.costNanoUsd);
  });
});

describe("judge without a key of its own", () => {
  let gw: Gateway | undefined;
  let minting: Actor | undefined;
  after(async () => {
    await minting?.drain(5_000);
    await gw?.close();
  });

  it("mints one key per run (kind judge, capped at the run's budget) that the gateway takes; revoked at the run's end, the next job gets a new one", async () => {
    // This judge replaces the fixed-key one on the judge consumer, and calls through a real gateway.
    await actor.drain(5_000);
    gw = await startGateway({
      db: fdb.db,
      aliases: {
        "claude-sonnet-4-5": {
          upstream: { provider: "anthropic", baseUrl: provider.url, apiKey: JUDGE_KEY },
        },
      },
    });
    minting = await startJudge({
      plane,
      db: fdb.db,
      log: silentLogger(),
      gatewayUrl: gw.url,
      retryBaseDelayMs: 10,
    });
    await putRun("minted", "claude", 3);
    provider.setScenario({ text: '```json\n{"score": 1, "rationale": "fine"}\n```' });
    const keys = () =>
      fdb.db.query<{ kind: string; cell_id: string | null; models: string; cap: string; revoked: boolean }>(
        `SELECT kind, cell_id, models, cap_nano_usd::text AS cap, revoked_at IS NOT NULL AS revoked
           FROM virtual_keys WHERE run_name = $1 ORDER BY created_at`,
        ["minted"],
      );
    await submit("minted", "cell-m1");
    assert.equal((await verdicts.wait("cell-m1")).score, 1);
    const first = (await keys()).rows;
    assert.equal(first.length, 1, "one key for the run");
    assert.deepEqual(
      { ...first[0], models: JSON.parse(first[0]!.models) },
      { kind: "judge", cell_id: null, models: ["claude-sonnet-4-5"], cap: "3000000000", revoked: false },
    );
    // Only the gateway's own upstream key reached the provider, and the gateway logged the call for the run.
    assert.equal(provider.calls().at(-1)?.key, JUDGE_KEY);
    const logged = await fdb.db.query("SELECT 1 FROM gateway_spend_log WHERE run_name = $1", ["minted"]);
    assert.equal(logged.rowCount, 1);

    // The run ends: every key of it is revoked (the results-writer's reconcile does this), the judge's included.
    assert.equal(await revokeRunKeys(fdb.db, "minted"), 1);
    // A resumed run's next job: the gateway refuses the old key, the judge mints a new one and is judged.
    await submit("minted", "cell-m2");
    assert.equal((await verdicts.wait("cell-m2")).score, 1);
    const after = (await keys()).rows;
    assert.deepEqual(
      after.map((k) => [k.kind, k.revoked]),
      [
        ["judge", true],
        ["judge", false],
      ],
    );
  });
});
