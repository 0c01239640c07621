import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { budgetState, type DispatchRig, startRig, waitFor } from "./dispatcher-fixture.js";

let rig: DispatchRig;
const N = Number(process.env.EF_DISPATCH_LOAD_CELLS ?? 2_000);
const CALLS = Number(process.env.EF_DISPATCH_LOAD_CALLS ?? 1);
/** Every attempt, its call made, holds here until the test has seen all N running at once. */
let release!: () => void;
const hold = new Promise<void>((r) => {
  release = r;
});
/** Harnesses running at once, per dispatcher replica (each has its own sim backend). */
const running = [0, 0];
let peak = 0;

before(async () => {
  rig = await startRig(Array.from({ length: N / 2 }, (_, i) => ({ id: `t${i}` })));
  for (const replica of [0, 1]) {
    await rig.dispatcher({
      sim: {
        calls: CALLS,
        thinkMs: 200,
        hold,
        onRunning: (n) => {
          running[replica] = n;
          peak = Math.max(peak, running[0]! + running[1]!);
        },
      },
    });
  }
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
    // No attempt may end before the test lets them: all N must be running together, holding a reservation each.
    const open = await waitFor(
      "all N running at once",
      async () => {
        const b = await budgetState(rig.client, "load");
        return peak >= N && rig.launches.length >= N ? Object.keys(b?.open ?? {}).length : undefined;
      },
      150_000,
    );
    const launchedIn = Date.now() - t0;
    assert.equal(peak, N, "every attempt was running at the same moment");
    assert.equal(open, N, "each running attempt held its reservation");
    release();
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
    process.stderr.write(
      `${JSON.stringify({ cells: N, launchedInMs: launchedIn, peakRunning: peak, doneInMs: doneIn, billableNano: b.billableNano })}\n`,
    );
    assert.equal(new Set(rig.launches.map((l) => l.cellId)).size, N);
    assert.equal(b.billableNano, N * CALLS * 4_500_000); // 1000 in + 100 out at $3 / $15 per Mtok
  });
});
