/**
 * JetStream's storage full, mid-run: the plane stops launching and says why (the dispatcher's log and heartbeat,
 * `status`'s storage line), loses nothing, and goes on by itself when space returns — every cell ends exactly once,
 * every reservation is released, every attempt lands one row.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { Writable } from "node:stream";
import { after, before, describe, it } from "node:test";
import { jetstream } from "@nats-io/jetstream";
import { createLogger } from "../../lib/log.js";
import { storageHealth } from "../../plane/health.js";
import { isStorageFull } from "../../protocol/errors.js";
import {
  attemptResults,
  budgetState,
  type DispatchRig,
  rigRun,
  startRig,
  waitFor,
} from "./dispatcher-fixture.js";

const CELLS = 12;
let rig: DispatchRig;
let dispatcherLog = "";

before(async () => {
  rig = await startRig(
    Array.from({ length: CELLS }, (_, i) => ({ id: `t${i}` })),
    { nats: { maxFileStore: "32MB" } },
  );
  await rig.resultsWriter({ progressIntervalMs: 200, settings: { retention: { pruneAfterMs: null } } });
  // The dispatcher and its attempts (the sim backend stands in for tasks) log to one place.
  const log = createLogger({
    name: "dispatcher",
    level: "info",
    destination: new Writable({
      write(chunk, _enc, cb) {
        dispatcherLog += String(chunk);
        cb();
      },
    }),
  });
  await rig.dispatcher({ sim: { thinkMs: 1_500, outcome: () => "EMPTY_PATCH", log }, extra: { log } });
});

after(async () => {
  await rig?.close();
});

/** Publish to a stream of its own until JetStream refuses for lack of room: someone else filled the store. */
async function fillStore(): Promise<number> {
  await rig.client.jsm.streams.add({ name: "FILLER", subjects: ["filler.>"] });
  const js = jetstream(rig.client.nc);
  const chunk = new Uint8Array(256 * 1024).fill(7);
  for (let i = 0; ; i++) {
    try {
      await js.publish("filler.x", chunk);
    } catch (err) {
      assert.ok(isStorageFull(err), `the store refused for lack of room: ${String(err)}`);
      return i;
    }
  }
}

describe("JetStream storage full", { timeout: 240_000 }, () => {
  it("stops launching and says why, loses nothing, and goes on when space returns", async () => {
    await rig.submit(rigRun("full", ["*"], { parallel_runs: 3, budget_usd: 5, unvalidated: true }));
    await waitFor("the first launches", async () => (rig.launches.length >= 3 ? true : undefined));
    const filled = await fillStore();
    const launchedWhenFull = rig.launches.length;
    assert.ok(launchedWhenFull < CELLS, "the store filled mid-run");

    // Says why: status's storage line, and the dispatcher held up (its log; its heartbeat once it can be written).
    const health = await storageHealth(rig.client);
    assert.equal(health.full, true, JSON.stringify(health));
    // Whichever write meets the full store first says so: a claim (the dispatcher held up) or an attempt's result.
    await waitFor("the dispatcher to say the store is full", async () =>
      /(held up, taking no new work|result waits for room): JetStream storage is full/.test(dispatcherLog)
        ? true
        : undefined,
    ).catch((err: unknown) => {
      throw new Error(`${String(err)}; the dispatcher's log ends:\n${dispatcherLog.slice(-4_000)}`);
    });
    const status = spawnSync(process.execPath, ["bin/evalfleet.js", "status"], {
      env: { ...process.env, ...rig.nats.env },
      encoding: "utf8",
      timeout: 60_000,
    });
    assert.match(status.stdout, /^JetStream: FULL/m, `${status.stdout}\n${status.stderr}`);
    // Stops launching: with no room for a claim, no attempt starts (those already running end as they will).
    const launches = rig.launches.length;
    await new Promise((r) => setTimeout(r, 3_000));
    assert.equal(rig.launches.length, launches, "nothing launched while the store was full");

    // Space returns: the filler goes, and the run finishes by itself.
    await rig.client.jsm.streams.delete("FILLER");
    assert.equal((await storageHealth(rig.client)).writable, true);
    const results = await waitFor(
      "every cell final",
      async () => {
        const r = await attemptResults(rig.client, "full");
        const b = await budgetState(rig.client, "full");
        return r.length >= CELLS && b && Object.keys(b.open).length === 0 ? r : undefined;
      },
      180_000,
    );
    assert.equal(new Set(results.map((r) => r.cellId)).size, CELLS, "every cell ended");
    assert.equal(results.length, CELLS, "each exactly once");
    const rows = await waitFor("every row", async () => {
      const r = await rig.store.db.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM run_results WHERE run_name = 'full'",
      );
      return (r.rows[0]?.n ?? 0) === CELLS ? r.rows[0]!.n : undefined;
    });
    assert.equal(rows, CELLS);
    process.stderr.write(
      `${JSON.stringify({ filledWith: filled, launchedBeforeFull: launchedWhenFull, cells: CELLS })}\n`,
    );
  });
});
