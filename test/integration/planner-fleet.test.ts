import assert from "node:assert/strict";
import { after, before, it } from "node:test";
import { RunCache } from "../../actors/dispatcher/runs.js";
import { startPlanner } from "../../actors/planner/actor.js";
import { ProgressWriter } from "../../actors/results-writer/progress.js";
import type { Actor } from "../../actors/runtime/actor.js";
import { silentLogger } from "../../lib/log.js";
import type { Plane } from "../../plane/connect.js";
import type { RunProgress } from "../../protocol/messages.js";
import { ProgressKeys, StateKeys, Subjects } from "../../protocol/subjects.js";
import { insertLedgerCalls, type LedgerCallRow, setCellStatus } from "../../store/results.js";
import { type PlaneRig, startPlaneRig } from "../helpers/plane-rig.js";
import { waitFor } from "../helpers/wait.js";

let rig: PlaneRig;
let plane: Plane;
let planner: Actor;

const RUN = "fleet-run";
/** the model's pool: its name as the provider knows it */
const POOL = "m";

before(async () => {
  rig = await startPlaneRig("planner-fleet", { tasks: ["t1", "t2", "t3"].map((id) => ({ id })) });
  plane = await rig.plane("planner-fleet");
  planner = rig.adopt(
    await startPlanner({
      plane,
      db: rig.store.db,
      log: silentLogger(),
      fleetIntervalMs: 200,
      libraryRoots: [rig.libDir],
    }),
  );
});

after(async () => {
  await rig.close();
});

async function runKey(): Promise<RunProgress | undefined> {
  const e = await plane.kv.progress.get(ProgressKeys.run(RUN));
  return e && e.length > 0 ? e.json<RunProgress>() : undefined;
}

it("sizes the pool by Little's law from the ledger and the pacer's limits, keeping the writer's counters", async () => {
  plane.nc.publish(
    Subjects.runSubmit,
    JSON.stringify({
      name: RUN,
      harnesses: [{ name: "h", adapter: "command" }],
      models: [{ name: "m", prices: { input_per_mtok: 1, output_per_mtok: 2 } }],
      tasks: ["*"],
      task_library_path: rig.libDir,
      repeats: 4,
      unvalidated: true,
    }),
  );
  // Plan time: no limits anywhere yet, so the pool is not capped and its pool key says why.
  const planned = await waitFor("planned", async () => {
    const p = await runKey();
    return p?.phase === "planned" ? p : undefined;
  });
  assert.equal(planned.totalCells, 12);
  assert.equal(planned.pools?.[POOL], undefined);
  const poolAtPlan = (await plane.kv.progress.get(ProgressKeys.pool(RUN, POOL)))?.json<
    Record<string, unknown>
  >();
  assert.equal(poolAtPlan?.fleetSize, null);
  assert.match(String(poolAtPlan?.reason), /no limits/);

  // Three attempts running, one done; each made 4 calls of 2 s, 500 ms apart: 9.5 s for 4 calls.
  const cells = ["t1__r0", "t1__r1", "t2__r0", "t2__r1"].map((s) => `h__${POOL}__${s}`);
  for (const c of cells.slice(0, 3)) await setCellStatus(rig.store.db, RUN, c, "running");
  await setCellStatus(rig.store.db, RUN, cells[3]!, "completed");
  const t0 = Date.parse("2026-01-01T00:00:00Z");
  const rows: LedgerCallRow[] = [];
  for (const cellId of cells.slice(0, 3))
    for (let i = 0; i < 4; i++)
      rows.push({
        callId: `${cellId}-${i}`,
        runName: RUN,
        cellId,
        attempt: 0,
        pool: POOL,
        provider: "anthropic",
        status: "ok",
        inputTokens: 10_000,
        outputTokens: 500,
        costNanoUsd: 1_000_000,
        latencyMs: 2_000,
        pacerWaitMs: 0,
        startedAt: new Date(t0 + i * 2_500),
      });
  await insertLedgerCalls(rig.store.db, rows);

  // The results-writer's counters, merged onto the run key as it does.
  const writer = new ProgressWriter({
    kv: plane.kv.progress,
    jsm: plane.jsm,
    db: rig.store.db,
    log: silentLogger(),
    actor: planner,
  });
  await writer.updateRun(RUN);

  // The pacer's record for the pool, with limits (as an owner checkpoints it).
  await plane.kv.pacer.put(
    StateKeys.pacerPool(POOL),
    JSON.stringify({
      v: 1,
      owner: null,
      inbox: null,
      heartbeatWallMs: Date.now(),
      checkpoint: {
        limits: { requestsPerMinute: 1_000, inputTokensPerMinute: 1_000_000, outputTokensPerMinute: 80_000 },
        pausedUntilWallMs: 0,
        overloadStreak: 0,
      },
      stats: { settledCalls: 12, inputTokens: 120_000, outputTokens: 6_000, outputTokensP95: 500 },
    }),
  );

  // Little's law by hand: input binds at 0.95 × 1,000,000 / 10,000 = 95 calls/min; one attempt makes 4 calls per
  // 9.5 s = 25.26 calls/min; 95 / 25.26 = 3.76 → 3 attempts at once.
  const sized = await waitFor("re-size", async () => {
    const p = await runKey();
    return p?.pools?.[POOL] ? p : undefined;
  });
  const pool = sized.pools?.[POOL];
  assert.equal(pool?.fleetSize, 3);
  assert.equal(pool?.inputs?.callsPerMinute, 95);
  assert.equal(pool?.inputs?.callsPerAttempt, 4);
  assert.equal(pool?.inputs?.attemptDurationMs, 9_500);
  assert.equal(pool?.inputs?.inputTokensPerMinute, 1_000_000);
  assert.equal(pool?.inputs?.pendingAttempts, 11);
  assert.equal(pool?.inputs?.fromRun, 1);
  // The results-writer's counters survived the merge.
  assert.equal(sized.running, 3);
  assert.equal(sized.completed, 1);
  assert.equal(sized.pending, 8);
  assert.equal(sized.totalCostNanoUsd, 12_000_000);
  assert.equal(sized.phase, "running");

  const poolKey = (await plane.kv.progress.get(ProgressKeys.pool(RUN, POOL)))?.json<
    Record<string, unknown>
  >();
  assert.equal(poolKey?.fleetSize, 3);
  assert.equal(poolKey?.binding, "inputTokens");
  assert.equal(poolKey?.source, "run");

  // What the dispatcher reads: the run key's pools as a per-pool cap.
  const ctx = await new RunCache(plane.kv.jobs, plane.kv.progress, rig.store.db).get(RUN);
  assert.equal(ctx.poolLimits[POOL], 3);

  // And the writer's next merge keeps the pools.
  await setCellStatus(rig.store.db, RUN, cells[0]!, "completed");
  await writer.updateRun(RUN);
  const after = await runKey();
  assert.equal(after?.completed, 2);
  assert.equal(after?.pools?.[POOL]?.fleetSize, 3);
});
