/**
 * Capacity: nothing in NATS expires by age, so a finished run's state is pruned — its messages, keys and blobs —
 * while its rows stay in PostgreSQL; a run still going is never touched; and a pruned run resumed later numbers its
 * new attempts after the old ones (from PostgreSQL), so no id, subject or blob is ever reused.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { startGraderSupervisor } from "../../actors/grader-supervisor/actor.js";
import { pruneBlocker, pruneFinishedRuns } from "../../actors/results-writer/prune.js";
import { silentLogger } from "../../lib/log.js";
import { INLINE_PATCH_MAX_BYTES } from "../../protocol/messages.js";
import { ProgressKeys } from "../../protocol/subjects.js";
import { runFootprint } from "../../protocol/topology.js";
import { attemptResults, type DispatchRig, rigRun, startRig, waitFor } from "./dispatcher-fixture.js";

let rig: DispatchRig;

const config = (name: string) => rigRun(name, ["a", "b"], { parallel_runs: 2, budget_usd: 5 });

before(async () => {
  rig = await startRig([{ id: "a" }, { id: "b" }]);
  const writer = await rig.resultsWriter({
    progressIntervalMs: 100,
    settings: { retention: { pruneAfterMs: null } },
  });
  // A finished run has every score in: the grader answers each patch (these tasks have no repository, so each
  // grade is an infrastructure failure — a score all the same).
  rig.adopt(
    await startGraderSupervisor({ plane: writer.plane, db: rig.store.db, log: silentLogger(), env: {} }),
  );
  await rig.dispatcher({
    sim: {
      // Task b fails its first attempt (HARNESS_ERROR is final), so a resume re-runs it; the run `live` thinks long.
      outcome: (ref) => (ref.cellId.includes("__b__") && ref.attempt === 0 ? "HARNESS_ERROR" : "PATCH_READY"),
      thinkMs: (ref) => (ref.runName === "live" ? 120_000 : 50),
      // Patches too big to travel inline: they are blobs, which a prune removes (and their rows keep).
      patchPadBytes: INLINE_PATCH_MAX_BYTES,
    },
  });
});

after(async () => {
  await rig?.close();
});

async function phase(run: string): Promise<string | undefined> {
  const e = await rig.client.kv.progress.get(ProgressKeys.run(run));
  return e?.operation === "PUT" ? (e.json() as { phase: string }).phase : undefined;
}

/** What NATS still holds of a run: stream messages, KV entries (markers included), blobs. */
async function footprint(run: string): Promise<{ messages: number; keys: number; blobs: number }> {
  const fp = runFootprint(run);
  let messages = 0;
  for (const s of fp.streams) {
    const info = await rig.client.jsm.streams.info(s.stream, { subjects_filter: s.filter });
    messages += Object.values(info.state.subjects ?? {}).reduce((a, b) => a + b, 0);
  }
  let keys = 0;
  for (const k of fp.keys) {
    const info = await rig.client.jsm.streams.info(`KV_${k.bucket}`, {
      subjects_filter: `$KV.${k.bucket}.${k.filter}`,
    });
    keys += Object.values(info.state.subjects ?? {}).reduce((a, b) => a + b, 0);
  }
  const blobs = (await rig.client.blobs.list()).filter((b) => b.name.startsWith(fp.blobPrefix)).length;
  return { messages, keys, blobs };
}

async function rowCount(run: string): Promise<number> {
  const r = await rig.store.db.query<{ n: number }>(
    "SELECT count(*)::int AS n FROM run_results WHERE run_name = $1",
    [run],
  );
  return r.rows[0]?.n ?? 0;
}

describe("pruning finished runs", { timeout: 180_000 }, () => {
  it("removes a finished run's NATS state, keeps its rows, leaves a running run alone", async () => {
    await rig.submit(config("pr"));
    await waitFor("pr finished", async () => ((await phase("pr")) === "finished" ? true : undefined), 60_000);
    await rig.submit(config("live"));
    await waitFor(
      "live launched",
      async () => (rig.launches.filter((l) => l.runName === "live").length === 2 ? true : undefined),
      60_000,
    );

    const before = await footprint("pr");
    assert.ok(before.messages > 0 && before.keys > 0 && before.blobs > 0, JSON.stringify(before));
    const ctx = { plane: rig.client, db: rig.store.db, log: silentLogger() };
    assert.match((await pruneBlocker(ctx, "live", 0)) ?? "", /the run is (planned|running)|open/);
    assert.match((await pruneBlocker(ctx, "pr", 3_600_000)) ?? "", /finished \d+ min ago/);

    assert.deepEqual(await pruneFinishedRuns(ctx, 0), ["pr"]);
    assert.deepEqual(await footprint("pr"), { messages: 0, keys: 0, blobs: 0 });
    assert.equal(await rowCount("pr"), 2, "the durable rows stay");
    const kept = await rig.store.db.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM run_results WHERE run_name = 'pr' AND length(diff) > $1",
      [INLINE_PATCH_MAX_BYTES],
    );
    assert.equal(kept.rows[0]?.n, 1, "and so does the patch of the one PATCH_READY attempt, whole");
    const live = await footprint("live");
    assert.ok(live.keys > 0 && live.messages > 0, "the running run keeps its state");
    assert.deepEqual(await pruneFinishedRuns(ctx, 0), [], "a second prune finds nothing");
  });

  it("a pruned run resumed: its new attempts come after the old ones, and it finishes", async () => {
    const old = await rig.store.db.query<{ cell_id: string; attempt: number; status: string }>(
      "SELECT cell_id, attempt, status FROM run_results WHERE run_name = 'pr' ORDER BY cell_id",
    );
    const failed = old.rows.find((r) => r.status !== "PATCH_READY");
    assert.equal(failed?.attempt, 0, JSON.stringify(old.rows));
    await rig.submit(config("pr"));
    const results = await waitFor(
      "the failed cell re-run",
      async () => {
        const r = (await attemptResults(rig.client, "pr")).filter((x) => x.cellId === failed?.cell_id);
        return r.length > 0 && (await phase("pr")) === "finished" ? r : undefined;
      },
      60_000,
    );
    assert.deepEqual(
      results.map((r) => [r.attempt, r.status]),
      [[1, "PATCH_READY"]],
      "attempt 1, not a second attempt 0",
    );
    const row = await rig.store.db.query<{ attempt: number; status: string }>(
      "SELECT attempt, status FROM run_results WHERE run_name = 'pr' AND cell_id = $1",
      [failed?.cell_id],
    );
    assert.deepEqual(row.rows[0], { attempt: 1, status: "PATCH_READY" });
  });
});
