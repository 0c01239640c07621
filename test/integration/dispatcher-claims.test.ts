import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import type { KV } from "@nats-io/kv";
import { openPlane, type Plane } from "../../plane/connect.js";
import { type DispatchRig, rigRun, startRig, waitForSettled } from "./dispatcher-fixture.js";

let rig: DispatchRig;
let plane: Plane;

before(async () => {
  rig = await startRig([{ id: "a" }]);
  plane = await openPlane({ nats: rig.nats.settings, name: "flaky-claims" });
});

after(async () => {
  await rig.close();
  await plane.close();
});

/** The budgets bucket, except that the first write recording a launch fails (as when NATS goes away). */
function losingFirstLaunchRecord(kv: KV): { kv: KV; lost: () => number } {
  let lost = 0;
  const wrapped = new Proxy(kv, {
    get(target, prop) {
      if (prop === "put")
        return async (k: string, v: string) => {
          if (lost === 0 && k.startsWith("claim.") && v.includes("launchedAt")) {
            lost++;
            throw new Error("TimeoutError: timeout");
          }
          return await target.put(k, v);
        };
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { kv: wrapped, lost: () => lost };
}

describe("dispatcher claims", () => {
  it("an attempt whose launch record is lost is not launched a second time when its cell message comes back", async () => {
    const budgets = losingFirstLaunchRecord(plane.kv.budgets);
    await rig.dispatcher({
      sim: { thinkMs: 1_500 },
      extra: { plane: { ...plane, kv: { ...plane.kv, budgets: budgets.kv } } },
    });
    await rig.submit(rigRun("flaky", ["a"], { parallel_runs: 1, budget_usd: 1 }));
    const { results } = await waitForSettled(rig, "flaky", 1);
    assert.equal(budgets.lost(), 1, "the launch record was lost once");
    assert.equal(rig.launches.filter((l) => l.runName === "flaky").length, 1, "launched once");
    assert.equal(results[0]?.attempt, 0);
    assert.equal(results[0]?.status, "PATCH_READY");
  });
});
