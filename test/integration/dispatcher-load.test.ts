import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { budgetState, type DispatchRig, startRig, waitFor } from "./dispatcher-fixture.js";

let rig: DispatchRig;
const N = Number(process.env.EF_DISPATCH_LOAD_CELLS ?? 2_000);
const CALLS = Number(process.env.EF_DISPATCH_LOAD_CALLS ?? 1);

before(async () => {
  rig = await startRig(Array.from({ length: N / 2 }, (_, i) => ({ id: `t${i}` })));
  await rig.dispatcher({ sim: { calls: CALLS, thinkMs: 4_000 } });
  await rig.dispatcher({ sim: { calls: CALLS, thinkMs: 4_000 } });
});

after(async () => {
  await rig.close();
});

describe("dispatcher load", () => {
  it(`holds ${N} simulated attempts (each with a real shim and ${CALLS} metered call(s)) at once`, async () => {
    const t0 = Date.now();
    await rig.submit({
      name: "load",
      harnesses: [{ name: "h", adapter: "sim" }],
      models: [{ name: "claude-sonnet-4-5" }],
      tasks: ["*"],
      repeats: 2,
      parallel_runs: N,
      budget_usd: 1_000,
    });
    // Every attempt thinks for 4 s: all N must be running together before the first one ends.
    const peak = await waitFor(
      "all launched",
      async () => {
        const b = await budgetState(rig.client, "load");
        const open = b ? Object.keys(b.open).length : 0;
        return rig.launches.length >= N ? open : undefined;
      },
      150_000,
    );
    const launchedIn = Date.now() - t0;
    const b = await waitFor(
      "all released",
      async () => {
        const s = await budgetState(rig.client, "load");
        return s && Object.keys(s.open).length === 0 && s.billableNano === N * CALLS * 4_500_000
          ? s
          : undefined;
      },
      150_000,
    );
    const doneIn = Date.now() - t0;
    process.stderr.write(`${JSON.stringify((globalThis as { casStats?: unknown }).casStats)}\n`);
    process.stderr.write(
      `${JSON.stringify({ cells: N, launchedInMs: launchedIn, openAtLastLaunch: peak, doneInMs: doneIn, billableNano: b.billableNano })}\n`,
    );
    assert.equal(new Set(rig.launches.map((l) => l.cellId)).size, N);
    assert.equal(b.billableNano, N * CALLS * 4_500_000); // 1000 in + 100 out at $3 / $15 per Mtok
  });
});
