import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { AttemptStatus } from "../../protocol/messages.js";
import {
  attemptResults,
  cellStatuses,
  type DispatchRig,
  startRig,
  waitFor,
  waitForSettled,
} from "./dispatcher-fixture.js";

let rig: DispatchRig;
const DELAYS = [300, 600, 1_200];

/** Per task: the status of each attempt (the last one repeats). */
const SCRIPT: Record<string, AttemptStatus[]> = {
  slow: ["TIMEOUT"],
  crash: ["HARNESS_ERROR"],
  flaky: ["TIMEOUT", "PATCH_READY"],
  fine: ["PATCH_READY"],
};

before(async () => {
  rig = await startRig(Object.keys(SCRIPT).map((id) => ({ id })));
  const outcome = (ref: { cellId: string; attempt: number }) => {
    const task = ref.cellId.split("__")[2] ?? "fine";
    const s = SCRIPT[task] ?? ["PATCH_READY"];
    return s[Math.min(ref.attempt, s.length - 1)] ?? "PATCH_READY";
  };
  // Real metered calls: a shim per attempt in front of a scripted provider.
  await rig.dispatcher({ sim: { calls: 2, thinkMs: 60, outcome }, extra: { retryDelaysMs: DELAYS } });
});

after(async () => {
  await rig.close();
});

describe("dispatcher retries", () => {
  it("TIMEOUT relaunches after the delays then ends retry_exhausted; HARNESS_ERROR is final at once; reservations released", async () => {
    await rig.submit({
      name: "retry",
      harnesses: [{ name: "h", adapter: "sim" }],
      models: [{ name: "claude-sonnet-4-5" }],
      tasks: Object.keys(SCRIPT),
      parallel_runs: 10,
      budget_usd: 10,
      max_cost_usd: 1,
    });
    const { budget: b } = await waitForSettled(rig, "retry", 4 + 1 + 2 + 1, 60_000);
    const by = (task: string) =>
      rig.launches
        .filter((l) => l.runName === "retry" && l.cellId.includes(`__${task}__`))
        .sort((a, b) => a.attempt - b.attempt);
    // TIMEOUT: attempt 0 + three retries, spaced by at least the (injected) 2/4/8 s delays.
    const slow = by("slow");
    assert.deepEqual(
      slow.map((l) => l.attempt),
      [0, 1, 2, 3],
    );
    for (let i = 1; i < slow.length; i++)
      assert.ok(slow[i]!.at - slow[i - 1]!.at >= DELAYS[i - 1]!, `retry ${i} came after its delay`);
    assert.deepEqual(
      by("crash").map((l) => l.attempt),
      [0],
    );
    assert.deepEqual(
      by("flaky").map((l) => l.attempt),
      [0, 1],
    );
    // Every attempt made real metered calls; the balance is budget - actual spend (reservations all released).
    const results = await attemptResults(rig.client, "retry");
    const spent = results.reduce((a, r) => a + r.usage.costNanoUsd, 0);
    assert.ok(results.every((r) => r.usage.calls === 2 && r.usage.costNanoUsd > 0));
    assert.equal(b.billableNano, spent);
    assert.equal(b.remainingNano, 10_000_000_000 - spent);
    const st = await cellStatuses(rig, "retry");
    assert.equal(st.get("h__claude-sonnet-4-5__slow__r0")?.status, "running"); // final row is the results-writer's
  });

  it("a failed cell's reservation goes back to the balance so a waiting cell can run", async () => {
    // 0.60 holds one 0.50 reservation; parallel 1. Without the release, the second cell would find 0.10 - spend.
    await rig.submit({
      name: "release",
      harnesses: [{ name: "h", adapter: "sim" }],
      models: [{ name: "claude-sonnet-4-5" }],
      tasks: ["crash", "fine"],
      parallel_runs: 1,
      budget_usd: 0.6,
      max_cost_usd: 0.5,
    });
    await waitFor("both cells launched", async () =>
      rig.launches.filter((l) => l.runName === "release").length >= 2 ? true : undefined,
    );
    const st = await cellStatuses(rig, "release");
    assert.ok([...st.values()].every((s) => s.status !== "skipped"));
  });
});
