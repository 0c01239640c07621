import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { Subjects } from "../../protocol/subjects.js";
import { type DispatchRig, rigRun, startRig, waitForSettled } from "./dispatcher-fixture.js";

/*
 * A task that stopped gets a stand-in result from the dispatcher only when it left none of its own. Under load the
 * dispatcher handles results late — later than any grace period — so whether the task published one is asked of the
 * stream, not of what this replica has handled: every attempt's result is published exactly once.
 */

let rig: DispatchRig;

before(async () => {
  rig = await startRig(["a", "b", "c", "d"].map((id) => ({ id })));
});

after(async () => {
  await rig.close();
});

describe("stand-in results", () => {
  it("a task that published its own result gets none, however late the dispatcher handles it", async () => {
    const run = "standin";
    const seen = new Map<string, number>();
    const sub = rig.client.nc.subscribe(Subjects.attempts.run(run), {
      callback: (_err, m) => {
        seen.set(m.subject, (seen.get(m.subject) ?? 0) + 1);
      },
    });
    // No grace at all: the stand-in timer fires as soon as a stopped task is seen, before its result is handled.
    await rig.dispatcher({
      sim: { thinkMs: 30 },
      extra: { cleanExitGraceMs: 0, exitGraceMs: 0, observeMs: 10 },
    });
    await rig.submit(rigRun(run, ["a", "b", "c", "d"], { repeats: 6, parallel_runs: 24, budget_usd: 24 }));
    const { results } = await waitForSettled(rig, run, 24);
    await new Promise((r) => setTimeout(r, 500)); // a late stand-in would go by now
    await rig.client.nc.flush();
    sub.unsubscribe();
    assert.equal(results.length, 24);
    assert.ok(results.every((r) => r.status === "PATCH_READY" && r.sandbox === "simulated"));
    assert.equal(seen.size, 24, "one subject per attempt");
    assert.deepEqual(
      [...seen].filter(([, n]) => n !== 1),
      [],
      "each attempt's result published once: no stand-in after a result of its own",
    );
  });
});
