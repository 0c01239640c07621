import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { columnsOf, renderText, screenRows, wrapParts } from "../../cli/commands/watch.js";
import type { RunSummary } from "../../dashboard/live.js";
import { openPlane, type Plane } from "../../plane/connect.js";
import { type CellProgress, MessageTypes, type RunProgress } from "../../protocol/messages.js";
import { ProgressKeys } from "../../protocol/subjects.js";
import { startNats, type TestNats } from "../helpers/nats.js";

const ROOT = path.resolve(import.meta.dirname, "../..");

/** A run big enough that the unfitted lines were 91–113 characters: 20,000 cells, six-figure token counts. */
function runKey(run: string, completed: number): string {
  const v: RunProgress = {
    type: MessageTypes.runProgress,
    run,
    phase: "running",
    message: "planned: 20000 of 20000 cells queued",
    totalCells: 20_000,
    completed,
    failed: 1_234,
    skipped: 567,
    running: 2_000,
    pending: 20_000 - completed - 1_234 - 567 - 2_000,
    totalCostNanoUsd: 1_234_567_890_123,
    billableCostNanoUsd: 1_034_567_890_123,
    budgetNanoUsd: 5_000_000_000_000,
    updatedAt: new Date().toISOString(),
    pools: {
      "anthropic__claude-sonnet-4-5": { fleetSize: 1200 },
      "openai__gpt-5.1-codex": { fleetSize: 800 },
    },
  };
  return JSON.stringify(v);
}

function cell(run: string, i: number): string {
  const v: CellProgress = {
    type: MessageTypes.cellProgress,
    run,
    cellId: `c${i}`,
    attempt: 0,
    status: "completed",
    usage: {
      inputTokens: 98_765_432,
      outputTokens: 8_765_432,
      cacheReadTokens: 76_543_210,
      cacheWriteTokens: 6_543_210,
      reasoningTokens: 1_234_567,
      costNanoUsd: 5,
      calls: 1,
    },
    turns: 1,
    pacerWaitMs: 3_600_000,
    updatedAt: new Date().toISOString(),
  };
  return JSON.stringify(v);
}

function tmux(socket: string, args: string[]): string {
  return execFileSync("tmux", ["-L", socket, "-f", "/dev/null", ...args], { encoding: "utf8" });
}

describe("watch in a terminal 80 columns wide (tmux)", () => {
  let nats: TestNats;
  let plane: Plane;
  const socket = `ef-watch-${process.pid}`;
  const run = "wide.run-with-a-long-name";
  before(async () => {
    nats = await startNats();
    plane = await openPlane({ nats: nats.settings, name: "watch-tmux" });
    await plane.kv.progress.put(ProgressKeys.run(run), runKey(run, 100));
    for (let i = 0; i < 3; i++) await plane.kv.progress.put(ProgressKeys.cell(run, `c${i}`), cell(run, i));
  });
  after(async () => {
    try {
      tmux(socket, ["kill-server"]);
    } catch {
      // already gone
    }
    await plane?.close();
    await nats?.cleanup();
  });

  it("every frame fits and each redraw replaces the last one exactly", async () => {
    tmux(socket, [
      "new-session",
      "-d",
      "-x",
      "80",
      "-y",
      "40",
      "-s",
      "w",
      `cd ${ROOT} && NATS_URL=${nats.url} NATS_CREDS=${nats.creds} exec ${process.execPath} --import tsx cli/main.ts watch ${run} --interval-ms 100`,
    ]);
    tmux(socket, ["set-option", "-t", "w", "remain-on-exit", "on"]);
    const screen = () => tmux(socket, ["capture-pane", "-p", "-J", "-t", "w"]);
    const waitFor = async (re: RegExp) => {
      const deadline = Date.now() + 60_000;
      for (;;) {
        const s = screen();
        if (re.test(s)) return s;
        if (Date.now() > deadline) throw new Error(`timed out waiting for ${re}:\n${s}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    };
    await waitFor(/100\/20,000|1,901\/20,000/);
    // Many redraws, each a little different, as a live run gives.
    for (let done = 1000; done <= 10_000; done += 1000) {
      await plane.kv.progress.put(ProgressKeys.run(run), runKey(run, done));
      await waitFor(new RegExp(`${(done + 1801).toLocaleString("en-US")}/20,000 done`));
    }
    const last = screen();
    const lines = last.split("\n");
    // -J joins the rows a wrapped line took: a joined line wider than 80 would be one the terminal wrapped.
    for (const l of lines) assert.ok(columnsOf(l) <= 80, `a line is ${columnsOf(l)} columns:\n${l}`);
    assert.equal(
      last.split(`run ${run}`).length - 1,
      1,
      `one frame on screen, not the remains of others:\n${last}`,
    );
    assert.equal(last.split("cells   [").length - 1, 1, last);
    assert.equal(last.split("tokens  ").length - 1, 1, last);
    assert.match(last, /11,801\/20,000 done/);
    assert.doesNotMatch(last, /10,801\/20,000/, "no row of the previous frame is left");
    assert.match(last, /in 296,296,296/);
    assert.match(last, /anthropic__claude-sonnet-4-5 1200/);
  });
});

describe("watch's layout (pure)", () => {
  const summary: RunSummary = {
    run: "r",
    phase: "running",
    updatedAt: "2026-01-01T00:00:00.000Z",
    message: "",
    totalCells: 20_000,
    completed: 10_000,
    failed: 1_234,
    skipped: 567,
    running: 2_000,
    pending: 6_199,
    totalCostNanoUsd: 1_234_567_890_123,
    billableCostNanoUsd: 1_034_567_890_123,
    budgetNanoUsd: 5_000_000_000_000,
    tokens: {
      input: 296_296_296,
      output: 26_296_296,
      cacheRead: 229_629_630,
      cacheWrite: 19_629_630,
      reasoning: 3_703_701,
    },
    pacerWaitMs: 10_800_000,
    cellsWithKeys: 3,
    fleet: { "anthropic__claude-sonnet-4-5": 1200, "openai__gpt-5.1-codex": 800 },
    securityEvents: 3,
  };

  it("fits 80, 60 and 40 columns, keeping every figure", () => {
    for (const width of [80, 60, 40]) {
      const text = renderText(summary, { rate: 12.5, etaMs: 600_000 }, width);
      for (const l of text.split("\n")) assert.ok(columnsOf(l) <= width, `${width}: ${l}`);
      for (const figure of [
        "296,296,296",
        "3,703,701",
        "11,801/20,000",
        "pending 6,199",
        "anthropic__claude-sonnet-4-5",
        "1200",
      ])
        assert.ok(text.includes(figure), `${width} columns keep ${figure}:\n${text}`);
    }
  });

  it("counts the rows a frame takes, wrapped lines included", () => {
    assert.equal(screenRows(["x".repeat(80), "y".repeat(81), "", "z".repeat(161)], 80), 1 + 2 + 1 + 3);
    assert.deepEqual(wrapParts("label   ", ["aaaa", "bbbb", "cccc"], 20), [
      "label   aaaa · bbbb",
      "        cccc",
    ]);
  });
});
