import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { SimBackend } from "../../actors/dispatcher/backends/sim.js";
import type { LaunchBackend, LaunchRef } from "../../actors/dispatcher/backends/types.js";
import {
  cellStatuses,
  type DispatchRig,
  rigRun,
  runEvents,
  startRig,
  waitFor,
  waitForSettled,
} from "./dispatcher-fixture.js";

/*
 * A cell message that fails with an error trying again will not fix (a bug: here the backend throws a plain Error on
 * every launch of one task) is terminated after its tries; the cell must not stay pending for ever: its reservation
 * is released and it ends failed with the error, said in the run's events. The other cells run as usual.
 */

let rig: DispatchRig;

before(async () => {
  rig = await startRig([{ id: "broken" }, { id: "fine" }]);
  const sim = new SimBackend({ plane: rig.client, calls: 0, thinkMs: 20 });
  const backend: LaunchBackend = {
    name: "sim",
    launch: async (refs: LaunchRef[]) => {
      if (refs.some((r) => r.cellId.includes("__broken__")))
        throw new Error("backend bug: undefined is not a function");
      return sim.launch(refs);
    },
    observe: (h) => sim.observe(h),
    stop: (h, why) => sim.stop(h, why),
    close: () => sim.close(),
  };
  await rig.dispatcher({ backend });
});

after(async () => {
  await rig.close();
});

describe("a cell message that keeps failing", () => {
  it("ends its cell failed with the error and releases its reservation", { timeout: 120_000 }, async () => {
    await rig.submit(
      rigRun("poison", ["broken", "fine"], { parallel_runs: 1, budget_usd: 10, max_cost_usd: 1 }),
    );
    const cells = await waitFor(
      "the broken cell failed",
      async () => {
        const c = await cellStatuses(rig, "poison");
        const broken = [...c].find(([id]) => id.includes("__broken__"))?.[1];
        return broken?.status === "failed" ? c : undefined;
      },
      90_000,
    );
    const broken = [...cells].find(([id]) => id.includes("__broken__"))![1];
    assert.match(broken.error ?? "", /could not handle this cell: backend bug.*not the model's/);
    // parallel_runs 1: the fine cell ran only because the broken one's slot came back
    const { results, budget } = await waitForSettled(rig, "poison", 1, 60_000);
    assert.match(results[0]?.cellId ?? "", /__fine__/);
    assert.deepEqual(Object.keys(budget.open), [], "no reservation left open");
    const events = await runEvents(rig.client, "poison");
    assert.ok(events.some((e) => e.kind === "cell_failed" && e.message.includes("backend bug")));
  });
});
