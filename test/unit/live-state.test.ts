import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { bar, duration } from "../../cli/commands/watch.js";
import { eta, LiveKeys, LiveState, summarize } from "../../dashboard/live.js";
import { MessageTypes } from "../../protocol/messages.js";
import { ProgressKeys, StateKeys } from "../../protocol/subjects.js";

const enc = (v: unknown) => new TextEncoder().encode(JSON.stringify(v));
const put = (key: string, value: unknown) => ({ key, value: enc(value), operation: "PUT" as const });

const cell = (run: string, cellId: string, status: string, cost: number) => ({
  type: MessageTypes.cellProgress,
  run,
  cellId,
  attempt: 0,
  status,
  usage: { inputTokens: 10, outputTokens: 1, costNanoUsd: cost },
  turns: 0,
  pacerWaitMs: 5,
  updatedAt: "2026-01-01T00:00:00Z",
});

describe("live state from KV entries", () => {
  it("folds run, cell, actor, pool and pacer keys; ignores what does not parse", () => {
    const s = new LiveState();
    const run = "a.b"; // a dot in a run name stays one token in the key
    assert.deepEqual(
      s.applyProgress(
        put(ProgressKeys.run(run), {
          type: MessageTypes.runProgress,
          run,
          phase: "running",
          message: "m",
          totalCells: 2,
          completed: 1,
          failed: 0,
          skipped: 0,
          running: 1,
          pending: 0,
          totalCostNanoUsd: 9,
          billableCostNanoUsd: 8,
          budgetNanoUsd: null,
          updatedAt: "2026-01-01T00:00:00Z",
          pools: { p: { fleetSize: 3 } },
        }),
      ),
      { kind: "run", run },
    );
    assert.equal(
      s.applyProgress(put(ProgressKeys.cell(run, "c1"), cell(run, "c1", "completed", 4)))?.kind,
      "cell",
    );
    s.applyProgress(put(ProgressKeys.cell(run, "c2"), cell(run, "c2", "running", 1)));
    assert.equal(s.applyProgress(put(ProgressKeys.cell(run, "c3"), { nonsense: true })), null);
    assert.equal(
      s.applyProgress({ key: ProgressKeys.cell(run, "c3"), value: new Uint8Array([123]), operation: "PUT" }),
      null,
    );
    s.applyProgress(put(ProgressKeys.pool(run, "p"), { run, pool: "p", fleetSize: 5 }));
    s.applyPacer(
      put(StateKeys.pacerPool("h__m.x"), {
        owner: "o",
        heartbeatWallMs: 1,
        checkpoint: { limits: { rpm: 1 } },
      }),
    );
    const sum = summarize(s, run)!;
    assert.deepEqual(sum.tokens, { input: 20, output: 2, cacheRead: 0, cacheWrite: 0, reasoning: 0 });
    assert.equal(sum.pacerWaitMs, 10);
    assert.deepEqual(sum.fleet, { p: 5 }); // the pool key is newer than the run key's figure
    assert.deepEqual([...s.pacer.keys()], ["h__m.x"]);
    const del = s.applyProgress({
      key: ProgressKeys.cell(run, "c2"),
      value: new Uint8Array(),
      operation: "DEL",
    });
    assert.deepEqual(del, { kind: "cellDeleted", run, cellId: "c2" });
    assert.equal(summarize(s, run)!.cellsWithKeys, 1);
    assert.equal(summarize(s, "other"), null);
  });

  it("wildcards are built from protocol's key builders", () => {
    assert.deepEqual(LiveKeys, { runs: "run.>", actors: "actor.>", pools: "pool.>", pacerPools: "pool.>" });
  });

  it("ETA needs a few seconds of history", () => {
    assert.deepEqual(eta([], 5), { rate: null, etaMs: null });
    assert.deepEqual(
      eta(
        [
          { atMs: 0, done: 0 },
          { atMs: 100, done: 10 },
        ],
        5,
      ),
      { rate: null, etaMs: null },
    );
    assert.deepEqual(
      eta(
        [
          { atMs: 0, done: 0 },
          { atMs: 10_000, done: 20 },
        ],
        10,
      ),
      { rate: 2, etaMs: 5_000 },
    );
  });

  it("text bars and durations", () => {
    assert.equal(
      bar(
        [
          [2, "█"],
          [1, "▓"],
        ],
        4,
        8,
      ),
      "[████▓▓░░]",
    );
    assert.equal(bar([], 0, 4), "[    ]");
    assert.deepEqual(
      [duration(null), duration(4_000), duration(61_000), duration(3_720_000)],
      ["—", "4s", "1m 1s", "1h 2m"],
    );
  });
});
