import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { startResultsWriter } from "../../actors/results-writer/actor.js";
import { ProgressWriter } from "../../actors/results-writer/progress.js";
import { Actor } from "../../actors/runtime/actor.js";
import { silentLogger } from "../../lib/log.js";
import { openPlane, type Plane } from "../../plane/connect.js";
import {
  type AttemptResult,
  type AttemptStatus,
  type CellWork,
  type GradeJob,
  type GradeResult,
  INLINE_PATCH_MAX_BYTES,
  type LedgerCall,
  MessageTypes,
  type RunEvent,
  type RunProgress,
  type Verdict,
} from "../../protocol/messages.js";
import { usdToNanoNumber } from "../../protocol/money.js";
import { classifyAttempt, retriesOf } from "../../protocol/retry.js";
import { BlobNames, ProgressKeys, StateKeys, Subjects } from "../../protocol/subjects.js";
import { Consumers, Streams } from "../../protocol/topology.js";
import { buildPredictions } from "../../report/predictions.js";
import type { Db } from "../../store/db.js";
import { createAttemptKey } from "../../store/keys.js";
import { loadPredictionSources } from "../../store/report.js";
import {
  getAttemptResult,
  getCellStatuses,
  insertPendingCells,
  ledgerTotals,
  setCellStatus,
} from "../../store/results.js";
import { type FreshDb, freshPostgres } from "../helpers/db.js";
import { ledgerCall } from "../helpers/ledger.js";
import { startNats, type TestNats } from "../helpers/nats.js";

let nats: TestNats;
let store: FreshDb;
let admin: Plane;
const planes: Plane[] = [];
const writers: Actor[] = [];
const log = silentLogger();

const ACK_WAIT_NS = 4_000_000_000;
const WRITER_CONSUMERS = [
  Consumers.resultsWriterAttempts,
  Consumers.resultsWriterLedger,
  Consumers.resultsWriterGrades,
  Consumers.resultsWriterVerdicts,
];

async function plane(name: string): Promise<Plane> {
  // ensure: false keeps the short ack_wait set below (ensureTopology would restore the production value).
  const p = await openPlane({ nats: nats.settings, name, ensure: false });
  planes.push(p);
  return p;
}

async function writer(name: string, extra: Partial<Parameters<typeof startResultsWriter>[0]> = {}) {
  const p = await plane(name);
  const a = await startResultsWriter({ plane: p, db: store.db, log, progressIntervalMs: 50, ...extra });
  writers.push(a);
  return { actor: a, plane: p };
}

function work(run: string, cellId: string, extra: Partial<CellWork> = {}): CellWork {
  return {
    type: MessageTypes.cellWork,
    run,
    cellId,
    pool: "h__m",
    harness: "h",
    model: "m",
    reviewModel: null,
    taskId: `task-${cellId}`,
    track: "swe",
    repeat: 0,
    traceId: cellId,
    exempt: false,
    costMode: "platform",
    ...extra,
  };
}

/** What the planner does before any attempt: cell records in the jobs bucket, pending run_state rows. */
async function plan(run: string, cells: CellWork[]): Promise<void> {
  await Promise.all(cells.map((c) => admin.kv.jobs.put(StateKeys.job(run, c.cellId), JSON.stringify(c))));
  await insertPendingCells(store.db, run, cells);
}

function result(
  run: string,
  cellId: string,
  attempt: number,
  status: AttemptStatus,
  extra: Partial<AttemptResult> = {},
): AttemptResult {
  const patch = status === "PATCH_READY";
  return {
    type: MessageTypes.attemptResult,
    run,
    cellId,
    attempt,
    status,
    exitCode: 0,
    // The harness's claim: deliberately wrong, the ledger decides.
    usage: {
      inputTokens: 1,
      outputTokens: 1,
      cacheReadTokens: 0,
      cacheWriteTokens: 0,
      reasoningTokens: 0,
      costNanoUsd: 999_999_999,
      calls: 1,
    },
    numToolCalls: 3,
    patchHash: patch ? `hash-${cellId}-${attempt}` : null,
    patchRef: patch ? `${run}/${cellId}/${attempt}/patch.diff` : null,
    patch: null,
    trajectoryRef: null,
    stdout: "out",
    stderr: "",
    errorMessage: null,
    harnessReportedCostNanoUsd: null,
    startedAt: "2026-12-01T00:00:00.000Z",
    finishedAt: "2026-12-01T00:01:00.000Z",
    latencyMs: 60_000,
    timeToFirstAttemptMs: null,
    phases: [],
    ...extra,
  };
}

let callSeq = 0;
function call(
  run: string,
  cellId: string,
  attempt: number,
  costNanoUsd: number,
  extra: Partial<LedgerCall> = {},
) {
  const seq = ++callSeq;
  return ledgerCall({
    callId: `call-${seq}`,
    run,
    cellId,
    attempt,
    inputTokens: 100 + (seq % 7),
    outputTokens: 10 + (seq % 3),
    costNanoUsd,
    ...extra,
  });
}

/** What the dispatcher does before it launches an attempt: its claim in the budgets bucket. */
async function claim(run: string, cellId: string, attempt: number, base = 0): Promise<void> {
  await admin.kv.budgets.put(
    StateKeys.claim(run, cellId, attempt),
    JSON.stringify({ by: "test", gen: 1, base, pool: "h__m", at: new Date().toISOString() }),
  );
}

/** Publish messages the way their producers do (msg ids) — or, with `dup`, a second time without ids, so only
 * the writer's own idempotency stands between them and double rows. Every attempt named is claimed first, as the
 * dispatcher would have before launching it (unless `unclaimed`). */
async function publishAll(
  msgs: (AttemptResult | LedgerCall)[],
  dup = false,
  unclaimed = false,
): Promise<void> {
  if (!unclaimed)
    await Promise.all(
      [...new Map(msgs.map((m) => [`${m.run}/${m.cellId}/${m.attempt}`, m])).values()].map((m) =>
        claim(m.run, m.cellId, m.attempt),
      ),
    );
  await Promise.all(
    msgs.map((m) => {
      const ledger = m.type === MessageTypes.ledgerCall;
      const subject = ledger
        ? Subjects.ledger.one(m.run, m.cellId, m.attempt)
        : Subjects.attempts.one(m.run, m.cellId, m.attempt);
      const id = ledger ? m.callId : `${m.run}/${m.cellId}/${m.attempt}/result`;
      return admin.js.publish(subject, JSON.stringify(m), dup ? {} : { msgID: id });
    }),
  );
}

async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined | null | false>,
  ms = 30_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(v)})`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function progress(run: string): Promise<RunProgress | null> {
  const e = await admin.kv.progress.get(ProgressKeys.run(run));
  return e && e.length > 0 ? e.json<RunProgress>() : null;
}

/** Every message still in a stream under `subject` (work-queue streams keep what no consumer took). */
async function streamMessages<T>(stream: string, subject: string): Promise<T[]> {
  const info = await admin.jsm.streams.info(stream);
  const out: T[] = [];
  for (let seq = info.state.first_seq; seq <= info.state.last_seq; seq++) {
    const m = await admin.jsm.streams.getMessage(stream, { seq }).catch(() => null);
    if (m && m.subject === subject) out.push(m.json<T>());
  }
  return out;
}

async function count(sql: string, params: unknown[]): Promise<number> {
  const r = await store.db.query<{ n: number }>(sql, params);
  return Number(r.rows[0]?.n ?? 0);
}

async function ledgerSum(run: string, cellId: string): Promise<{ cost: number; input: number; n: number }> {
  const r = await store.db.query<{ cost: string; input: string; n: number }>(
    `SELECT COALESCE(sum(cost_nano_usd), 0)::text AS cost, COALESCE(sum(input_tokens), 0)::text AS input,
            count(*) AS n FROM ledger_calls WHERE run_name = $1 AND cell_id = $2 AND NOT voided`,
    [run, cellId],
  );
  const row = r.rows[0];
  return { cost: Number(row?.cost ?? 0), input: Number(row?.input ?? 0), n: Number(row?.n ?? 0) };
}

before(async () => {
  nats = await startNats();
  // PostgreSQL, not PGlite: the crash test runs a writer in a second process on the same database (the main-job
  // test runs the results-writer on PGlite).
  store = await freshPostgres("results_writer");
  admin = await openPlane({ nats: nats.settings, name: "rw-admin" });
  planes.push(admin);
  for (const c of WRITER_CONSUMERS)
    await admin.jsm.consumers.update(c.stream, c.durable, { ack_wait: ACK_WAIT_NS });
});

after(async () => {
  for (const w of writers) await w.stop();
  for (const p of planes) await p.close().catch(() => {});
  await store?.cleanup();
  await nats?.cleanup();
});

describe("results-writer", () => {
  it("a writer that dies between commit and publish loses nothing: another one re-enqueues each grade job once", async () => {
    const run = "crash";
    const cells = Array.from({ length: 12 }, (_, i) => work(run, `c${i}`));
    await plan(run, cells);
    let crashed = false;
    const a = await writer("rw-a", {
      afterCommit: async (feed) => {
        if (feed !== "attempts" || crashed) return;
        crashed = true;
        // The process is gone: no publish, no ack, no nak. Its messages come back after ack_wait.
        await a.plane.nc.close();
        throw new Error("crashed after commit");
      },
    });
    const msgs = cells.flatMap((c, i) => [
      call(run, c.cellId, 0, 1_000 + i),
      call(run, c.cellId, 0, 2_000 + i),
      result(run, c.cellId, 0, "PATCH_READY"),
    ]);
    await publishAll(msgs);
    await waitFor("the first writer's crash", async () => crashed);
    const landedBeforeCrash = await count("SELECT count(*) AS n FROM run_results WHERE run_name = $1", [run]);
    assert.ok(landedBeforeCrash > 0, "the crashed batch committed");
    assert.equal(
      (await streamMessages<GradeJob>(Streams.gradeJobs.name, Subjects.gradeJobs.one(run))).length,
      0,
    );
    await a.actor.stop();

    await writer("rw-b");
    const jobs = await waitFor("12 grade jobs", async () => {
      const j = await streamMessages<GradeJob>(Streams.gradeJobs.name, Subjects.gradeJobs.one(run));
      return j.length >= 12 && j;
    });
    await new Promise((r) => setTimeout(r, 500)); // a late duplicate would show up now
    const again = await streamMessages<GradeJob>(Streams.gradeJobs.name, Subjects.gradeJobs.one(run));
    assert.equal(again.length, 12);
    assert.deepEqual(new Set(jobs.map((j) => j.cellId)), new Set(cells.map((c) => c.cellId)));
    assert.equal(await count("SELECT count(*) AS n FROM run_results WHERE run_name = $1", [run]), 12);
    assert.equal(await count("SELECT count(*) AS n FROM ledger_calls WHERE run_name = $1", [run]), 24);
    for (const c of cells) {
      const row = await getAttemptResult(store.db, run, c.cellId);
      const sum = await ledgerSum(run, c.cellId);
      assert.equal(row?.totalCostNanoUsd, sum.cost, `${c.cellId} total = its ledger`);
    }
  });

  it("attempts and ledger land once under duplicates, totals come from the ledger, only patches are graded", async () => {
    const run = "dups";
    const cells = [
      ...Array.from({ length: 8 }, (_, i) => work(run, `ready${i}`)),
      ...Array.from({ length: 4 }, (_, i) => work(run, `empty${i}`)),
      work(run, "cap-patch"),
      work(run, "cap-nopatch"),
      work(run, "crash"),
      work(run, "open", { track: "open_ended" }),
      work(run, "exempt", { exempt: true, costMode: "subscription" }),
    ];
    await plan(run, cells);
    const status = (id: string): AttemptStatus =>
      id.startsWith("empty")
        ? "EMPTY_PATCH"
        : id.startsWith("cap")
          ? "BUDGET_EXCEEDED"
          : id === "crash"
            ? "HARNESS_ERROR"
            : "PATCH_READY";
    const calls = cells.flatMap((c, i) => [1, 2, 3].map((k) => call(run, c.cellId, 0, 1_000_000 * k + i)));
    const results = cells.map((c) =>
      result(run, c.cellId, 0, status(c.cellId), {
        ...(c.cellId === "cap-patch" ? { patchRef: `${run}/cap-patch/0/patch.diff`, patchHash: "h" } : {}),
        ...(c.cellId === "open" ? { trajectoryRef: `${run}/open/0/trajectory.jsonl` } : {}),
        ...(c.cellId === "crash" ? { errorMessage: "segfault" } : {}),
      }),
    );
    // Half the cells' calls before their results, half after: the totals must converge either way.
    const early = calls.filter((_, i) => i % 2 === 0);
    const late = calls.filter((_, i) => i % 2 === 1);
    await publishAll(early);
    await publishAll(results);
    await publishAll(late);
    await publishAll([...calls, ...results], true);

    await waitFor("every cell done", async () => {
      const p = await progress(run);
      return p?.completed === 16 && p.failed === 1;
    });
    // The ledger is its own feed: every call lands (duplicates once), and the run's progress converges on it.
    await waitFor("every ledger call", async () =>
      (await count("SELECT count(*) AS n FROM ledger_calls WHERE run_name = $1", [run])) >= calls.length
        ? true
        : undefined,
    );
    const ledgerTotal = (await ledgerTotals(store.db, run)).allNanoUsd;
    const final = await waitFor("the progress key on the whole ledger", async () => {
      const p = await progress(run);
      return p && p.totalCostNanoUsd === ledgerTotal ? p : undefined;
    });
    await new Promise((r) => setTimeout(r, 500)); // a late duplicate would show up now
    assert.equal(final.phase, "running", "grades are still awaited");
    assert.equal(
      await count("SELECT count(*) AS n FROM run_results WHERE run_name = $1", [run]),
      cells.length,
    );
    assert.equal(
      await count("SELECT count(*) AS n FROM ledger_calls WHERE run_name = $1", [run]),
      calls.length,
    );
    for (const c of cells) {
      const row = await getAttemptResult(store.db, run, c.cellId);
      const sum = await ledgerSum(run, c.cellId);
      assert.equal(row?.totalCostNanoUsd, sum.cost, `${c.cellId} total_cost`);
      assert.equal(row?.inputTokens, sum.input, `${c.cellId} input_tokens`);
      assert.equal(row?.numApiCalls, 3);
      assert.equal(row?.harness, "h");
      assert.equal(row?.taskId, `task-${c.cellId}`);
    }
    const exempt = await getAttemptResult(store.db, run, "exempt");
    assert.equal(exempt?.costMode, "subscription");
    assert.equal(exempt?.billableCostNanoUsd, 0);
    const ready = await getAttemptResult(store.db, run, "ready0");
    assert.equal(ready?.costMode, "platform");
    assert.equal(ready?.gradeStatus, "PENDING");
    assert.equal((await getAttemptResult(store.db, run, "empty0"))?.gradeStatus, null);
    assert.equal((await getAttemptResult(store.db, run, "crash"))?.exitClass, "non_retryable_kill");

    const totals = await ledgerTotals(store.db, run);
    assert.equal(final.totalCostNanoUsd, totals.allNanoUsd);
    const exemptSpend = (await ledgerSum(run, "exempt")).cost;
    assert.equal(final.billableCostNanoUsd, totals.allNanoUsd - exemptSpend);

    const jobs = await streamMessages<GradeJob>(Streams.gradeJobs.name, Subjects.gradeJobs.one(run));
    assert.deepEqual(
      jobs.map((j) => j.cellId).sort(),
      ["cap-patch", "exempt", ...Array.from({ length: 8 }, (_, i) => `ready${i}`)].sort(),
      "one grade job per patch; empty patches, errors and the open-ended cell none",
    );
    const judged = await streamMessages<{ cellId: string }>(
      Streams.judgeJobs.name,
      Subjects.judgeJobs.one(run),
    );
    assert.deepEqual(
      judged.map((j) => j.cellId),
      ["open"],
    );
    const cell = await admin.kv.progress.get(ProgressKeys.cell(run, "ready3"));
    const cp = cell?.json<{ status: string; usage: { costNanoUsd: number } }>();
    assert.equal(cp?.status, "completed");
    assert.equal(cp?.usage.costNanoUsd, (await ledgerSum(run, "ready3")).cost);
  });

  it("every patch is kept in its row: a small one inline (its grade job carries it), a big one copied from its blob", async () => {
    const run = "patches";
    await plan(run, [work(run, "small"), work(run, "big"), work(run, "misdescribed")]);
    const sha = (s: string) => createHash("sha256").update(s).digest("hex");
    const small = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-bug\n+fix ✓\n";
    // Past INLINE_PATCH_MAX_BYTES: the task puts it in the object store, as this test does.
    const big = `diff --git a/y b/y\n${"+line\n".repeat(Math.ceil(INLINE_PATCH_MAX_BYTES / 6) + 10)}`;
    const bigRef = BlobNames.attempt(run, "big", 0, "patch.diff");
    await admin.blobs.putBlob({ name: bigRef }, new TextEncoder().encode(big));
    await publishAll([
      result(run, "small", 0, "PATCH_READY", { patchRef: null, patch: small, patchHash: sha(small) }),
      result(run, "big", 0, "PATCH_READY", { patchRef: bigRef, patchHash: sha(big) }),
      result(run, "misdescribed", 0, "PATCH_READY", {
        patchRef: null,
        patch: small,
        patchHash: "not-its-hash",
      }),
    ]);
    const jobs = await waitFor("3 grade jobs", async () => {
      const j = await streamMessages<GradeJob>(Streams.gradeJobs.name, Subjects.gradeJobs.one(run));
      return j.length >= 3 && j;
    });
    const job = (cell: string) => jobs.find((j) => j.cellId === cell);
    assert.equal(job("small")?.patch, small, "the small patch travels in the grade job");
    assert.equal(job("small")?.patchRef, "");
    assert.equal(job("big")?.patch, null, "the big one stays a blob reference");
    assert.equal(job("big")?.patchRef, bigRef);
    assert.equal(
      job("misdescribed")?.patchHash,
      sha(small),
      "an inline patch is hashed as it is, not as said",
    );
    assert.equal((await getAttemptResult(store.db, run, "small"))?.diff, small);
    assert.equal((await getAttemptResult(store.db, run, "big"))?.diff, big, "copied from the blob");
    assert.equal((await getAttemptResult(store.db, run, "misdescribed"))?.patchHash, sha(small));
    // The run's blobs go when it is pruned; the rows keep every patch.
    await admin.blobs.delete(bigRef);
    const sources = await loadPredictionSources(store.db, run);
    const out = await buildPredictions(sources, async () => null);
    assert.deepEqual(out.missing, []);
    assert.deepEqual(
      out.predictions.map((p) => p.model_patch.length).sort((a, b) => a - b),
      [small.length, small.length, big.length],
    );
  });

  it("a result or call whose body names another cell or attempt than its subject is refused, with an event", async () => {
    const run = "forged";
    await plan(run, [work(run, "mine"), work(run, "victim")]);
    await writer("rw-forged");
    const onMine = (m: AttemptResult | LedgerCall, subject: (r: string, c: string, a: number) => string) =>
      admin.js.publish(subject(run, "mine", 1), JSON.stringify(m));
    // What a task allowed only attempts.forged.mine.1 / ledger.forged.mine.1 could try: speak for another cell,
    // or for a later attempt of its own cell.
    await onMine(result(run, "victim", 1, "PATCH_READY"), Subjects.attempts.one);
    await onMine(result(run, "mine", 7, "PATCH_READY"), Subjects.attempts.one);
    await onMine(call(run, "victim", 1, 5_000_000_000), Subjects.ledger.one);
    // Then the genuine ones.
    await publishAll([result(run, "victim", 1, "EMPTY_PATCH"), result(run, "mine", 1, "EMPTY_PATCH")]);
    await publishAll([call(run, "victim", 1, 1_000), call(run, "mine", 1, 2_000)]);
    await waitFor("both cells landed", async () => {
      const p = await progress(run);
      return p?.completed === 2;
    });
    assert.equal((await getAttemptResult(store.db, run, "victim"))?.attempt, 1);
    assert.equal((await getAttemptResult(store.db, run, "victim"))?.status, "EMPTY_PATCH");
    assert.equal((await getAttemptResult(store.db, run, "mine"))?.attempt, 1);
    await waitFor("the forged call left nothing", async () => (await ledgerSum(run, "victim")).n === 1);
    assert.equal((await ledgerSum(run, "victim")).cost, 1_000);
    const events = await waitFor("three refusals", async () => {
      const all = await streamMessages<RunEvent>(Streams.events.name, Subjects.events.run(run));
      const refused = all.filter((e) => e.kind === "poison" && /belongs on/.test(e.message));
      return refused.length === 3 ? refused : null;
    });
    assert.match(
      events.map((e) => e.message).join("\n"),
      /arrived on attempts\.forged\.mine\.1 but its body belongs on attempts\.forged\.victim\.1/,
    );
  });

  it("nothing forged lands: unclaimed attempts and calls are refused, a foreign patch ref never graded", async () => {
    const run = "unclaimed";
    await plan(run, [work(run, "a"), work(run, "b")]);
    await writer("rw-unclaimed");
    // Genuine: attempt 0 of both cells, claimed by the dispatcher.
    await publishAll([call(run, "a", 0, 1_000), result(run, "a", 0, "EMPTY_PATCH")]);
    await waitFor("a landed", async () => (await getAttemptResult(store.db, run, "a"))?.attempt === 0);
    // Forged, each on the subject its body names: a higher attempt of a's (never launched) that would replace a's
    // row and void its calls; a call billed to it; b's own result pointing at another run's resolved patch.
    await publishAll(
      [call(run, "a", 5, 9_000_000), result(run, "a", 5, "PATCH_READY"), result(run, "b", 9, "PATCH_READY")],
      false,
      true,
    );
    await publishAll([
      call(run, "b", 0, 2_000),
      result(run, "b", 0, "PATCH_READY", {
        patchRef: "other-run/winner/0/patch.diff",
        trajectoryRef: `${run}/b/0/trajectory.jsonl`,
      }),
    ]);
    const p = await waitFor("both cells final and four refusals counted", async () => {
      const x = await progress(run);
      return x?.completed === 1 && x.failed === 1 && x.securityEvents === 4 ? x : null;
    });
    assert.match(p.message, /4 forged messages refused/);
    const a = await getAttemptResult(store.db, run, "a");
    assert.equal(a?.attempt, 0, "the forged attempt 5 never became a's row");
    assert.equal(a?.status, "EMPTY_PATCH");
    assert.deepEqual(await ledgerSum(run, "a"), { cost: 1_000, input: a?.inputTokens ?? -1, n: 1 });
    assert.equal(
      await count("SELECT count(*) AS n FROM ledger_calls WHERE run_name = $1 AND attempt = 5", [run]),
      0,
    );
    const b = await getAttemptResult(store.db, run, "b");
    assert.equal(b?.status, "HARNESS_ERROR");
    assert.equal(b?.patchRef ?? null, null);
    assert.match(b?.errorMessage ?? "", /not one of the attempt's own blobs/);
    assert.equal(b?.gradeStatus ?? null, null, "nothing to grade");
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(await streamMessages<GradeJob>(Streams.gradeJobs.name, Subjects.gradeJobs.one(run)), []);
    const events = await waitFor("four security events", async () => {
      const all = await streamMessages<RunEvent>(Streams.events.name, Subjects.events.run(run));
      const sec = all.filter((e) => e.kind === "security");
      return sec.length >= 4 ? sec : null;
    });
    assert.deepEqual(events.map((e) => `${e.data?.check} ${e.data?.cellId} ${e.data?.attempt}`).sort(), [
      "foreign_blob_ref b 0",
      "unclaimed_attempt a 5",
      "unclaimed_attempt b 9",
      "unclaimed_ledger_call a 5",
    ]);
    assert.equal(
      await count("SELECT count(*) AS n FROM security_events WHERE run_name = $1", [run]),
      4,
      "one row per refusal; a redelivery adds none",
    );
  });

  it("a resumed cell counts retries from its resumed attempt, as the dispatcher does; retry_count is retries", async () => {
    const run = "resumed-retries";
    // Attempts 0-2 ran in an earlier submission; the resume starts the cell at attempt 3 (the dispatcher's claims
    // record that base).
    await plan(run, [work(run, "c", { firstAttempt: 3 })]);
    for (const a of [3, 4, 5, 6]) await claim(run, "c", a, 3);
    const land = async (attempt: number) => {
      await publishAll([result(run, "c", attempt, "TIMEOUT")], false, true);
      return waitFor(`attempt ${attempt} landed`, async () => {
        const row = await getAttemptResult(store.db, run, "c");
        return row?.attempt === attempt ? row : null;
      });
    };
    // Its first timeout is a retry, not retry_exhausted (three earlier attempts do not count against it).
    const first = await land(3);
    assert.equal(first.errorClass, "timeout");
    assert.equal(
      first.retryCount,
      0,
      "retry_count is the retries of this submission, not the attempt number",
    );
    assert.deepEqual(await getCellStatuses(store.db, run), { running: 1 });
    assert.equal((await land(4)).retryCount, 1);
    assert.equal((await land(5)).retryCount, 2);
    assert.deepEqual(await getCellStatuses(store.db, run), { running: 1 });
    // The third retry's timeout exhausts them, as the dispatcher (classifyAttempt over retriesOf) decides too.
    const last = await land(6);
    assert.equal(last.retryCount, 3);
    assert.equal(last.errorClass, "retry_exhausted");
    assert.equal(
      classifyAttempt("TIMEOUT", retriesOf(6, 3)).errorClass,
      "retry_exhausted",
      "the dispatcher's rule for the same attempt",
    );
    assert.equal(classifyAttempt("TIMEOUT", retriesOf(5, 3)).retry, true);
    assert.deepEqual(await getCellStatuses(store.db, run), { failed: 1 });
  });

  it("a retry voids the earlier attempt's calls: its row counts only its own, billable spend keeps them all", async () => {
    const run = "retry";
    await plan(run, [work(run, "c")]);
    const a0 = [call(run, "c", 0, 3_000), call(run, "c", 0, 4_000)];
    await publishAll([...a0, result(run, "c", 0, "TIMEOUT")]);
    await waitFor("attempt 0 landed", async () => {
      const row = await getAttemptResult(store.db, run, "c");
      return row?.attempt === 0 && row.totalCostNanoUsd === 7_000;
    });
    assert.deepEqual(await getCellStatuses(store.db, run), { running: 1 });
    assert.equal((await getAttemptResult(store.db, run, "c"))?.exitClass, "retryable_kill");

    const a1 = [call(run, "c", 1, 500)];
    await publishAll(a1);
    await waitFor("attempt 0 voided by attempt 1's first call", async () => {
      const n = await count("SELECT count(*) AS n FROM ledger_calls WHERE run_name = $1 AND voided", [run]);
      return n === 2;
    });
    await publishAll([result(run, "c", 1, "PATCH_READY")]);
    // A late call of attempt 0 and a redelivered attempt-0 result change nothing about attempt 1.
    const lateCall = call(run, "c", 0, 8_000);
    await publishAll([lateCall, result(run, "c", 0, "TIMEOUT")], true);
    const p = await waitFor("spend of both attempts", async () => {
      const x = await progress(run);
      return x?.totalCostNanoUsd === 15_500 && x.completed === 1 ? x : null;
    });
    const row = await getAttemptResult(store.db, run, "c");
    assert.equal(row?.attempt, 1);
    assert.equal(row?.status, "PATCH_READY");
    assert.equal(row?.totalCostNanoUsd, 500, "only attempt 1's call counts in its row");
    assert.equal(row?.billableCostNanoUsd, 15_500, "every call of the cell was spent");
    assert.equal(row?.retryCount, 1);
    assert.equal(
      await count("SELECT count(*) AS n FROM ledger_calls WHERE run_name = $1 AND voided", [run]),
      3,
    );
    assert.equal(p.billableCostNanoUsd, 15_500);
    const t = await ledgerTotals(store.db, run);
    assert.deepEqual(t, { nonVoidedNanoUsd: 500, allNanoUsd: 15_500, calls: 4, voidedCalls: 3 });
    assert.deepEqual(await getCellStatuses(store.db, run), { completed: 1 });
    // `finished` waits for the grade of the PATCH_READY attempt.
    assert.equal((await progress(run))?.phase, "running");
  });

  it("grades and verdicts land on their attempts, then the run finishes with one event", async () => {
    const run = "scored";
    const cells = [
      work(run, "full"),
      work(run, "partial"),
      work(run, "infra"),
      work(run, "open", { track: "open_ended" }),
    ];
    await plan(run, cells);
    await publishAll([
      ...cells.map((c) => call(run, c.cellId, 0, 10_000)),
      ...cells.map((c) => result(run, c.cellId, 0, "PATCH_READY")),
    ]);
    await waitFor("rows", async () => (await progress(run))?.completed === 4);
    assert.equal((await progress(run))?.phase, "running", "grades are still awaited");
    const grade = (
      cellId: string,
      status: GradeResult["status"],
      report: Record<string, unknown>,
    ): GradeResult => ({
      type: MessageTypes.gradeResult,
      run,
      cellId,
      attempt: 0,
      status,
      resolved: status === "FULL",
      report,
      imageDigest: null,
      graderVersion: "t",
      cached: false,
      error: status === "INFRA_FAILURE" ? "docker down" : null,
      gradedAt: "2026-12-01T00:02:00.000Z",
    });
    const tests = (f2p: [number, number], p2p: [number, number]) => ({
      inst: {
        patch_is_None: false,
        patch_exists: true,
        patch_successfully_applied: true,
        resolved: false,
        tests_status: {
          FAIL_TO_PASS: { success: Array(f2p[0]).fill("t"), failure: Array(f2p[1]).fill("t") },
          PASS_TO_PASS: { success: Array(p2p[0]).fill("t"), failure: Array(p2p[1]).fill("t") },
          FAIL_TO_FAIL: { success: [], failure: [] },
          PASS_TO_FAIL: { success: [], failure: [] },
        },
      },
    });
    const grades = [
      grade("full", "FULL", tests([2, 0], [2, 0])),
      grade("partial", "PARTIAL", tests([1, 1], [1, 1])),
      grade("infra", "INFRA_FAILURE", {}),
    ];
    const verdict: Verdict = {
      type: MessageTypes.verdict,
      run,
      cellId: "open",
      attempt: 0,
      score: 0.75,
      rationale: "mostly right",
      judgeModel: "judge",
      costNanoUsd: 123,
      judgedAt: "2026-12-01T00:03:00.000Z",
    };
    for (const g of [...grades, ...grades])
      await admin.js.publish(Subjects.gradeResults.one(run), JSON.stringify(g));
    await admin.js.publish(Subjects.judgeResults.one(run), JSON.stringify(verdict));
    await waitFor("finished", async () => (await progress(run))?.phase === "finished");

    const full = await getAttemptResult(store.db, run, "full");
    assert.equal(full?.gradeStatus, "FULL");
    assert.equal(full?.resolved, true);
    assert.equal(full?.exitClass, "pass");
    assert.equal(full?.success, 1);
    assert.ok(full?.gradedAt);
    assert.deepEqual(Object.keys(full?.gradeReport as object), ["inst"]);
    const partial = await getAttemptResult(store.db, run, "partial");
    assert.equal(partial?.exitClass, "fail");
    assert.equal(partial?.success, 0.5, "2 of 4 expected tests pass");
    assert.equal(partial?.errorClass, "partial");
    const infra = await getAttemptResult(store.db, run, "infra");
    assert.equal(infra?.gradeStatus, "INFRA_FAILURE");
    assert.notEqual(infra?.exitClass, "fail", "an infrastructure failure is not the model's fail");
    assert.equal(infra?.resolved, null);
    assert.equal(infra?.totalCostNanoUsd, 10_000, "the row and its money stay");
    const open = await getAttemptResult(store.db, run, "open");
    assert.equal(open?.verdictScore, 0.75);
    assert.equal((open?.verdict as { rationale?: string } | undefined)?.rationale, "mostly right");

    await new Promise((r) => setTimeout(r, 300));
    const events = await streamMessages<RunEvent>(Streams.events.name, Subjects.events.run(run));
    assert.equal(events.filter((e) => e.kind === "finished").length, 1);
    const p = await progress(run);
    assert.equal(p?.totalCostNanoUsd, 40_000);
    assert.equal(p?.completed, 4);
    assert.equal(p?.pending, 0);
  });

  it("a writer that starts after a lost progress write still finishes the run", async () => {
    const run = "adopted";
    await plan(run, [work(run, "a"), work(run, "b")]);
    for (const c of ["a", "b"]) await setCellStatus(store.db, run, c, "completed");
    // The last writer acked everything but died before writing this key: it still says running.
    const stale: RunProgress = {
      type: MessageTypes.runProgress,
      run,
      phase: "running",
      message: "",
      totalCells: 2,
      completed: 1,
      failed: 0,
      skipped: 0,
      running: 1,
      pending: 0,
      totalCostNanoUsd: 0,
      billableCostNanoUsd: 0,
      budgetNanoUsd: 5,
      updatedAt: new Date().toISOString(),
    };
    await admin.kv.progress.put(ProgressKeys.run(run), JSON.stringify(stale));
    const adopter = await writer("rw-adopter");
    const p = await waitFor("finished", async () => {
      const x = await progress(run);
      return x?.phase === "finished" && x;
    });
    writers.splice(writers.indexOf(adopter.actor), 1);
    await adopter.actor.stop();
    assert.equal(p.completed, 2);
    assert.equal(p.budgetNanoUsd, 5, "fields the writer does not own are kept");
  });

  it("a run is reconciled before its key says finished: a writer failing there leaves the run to the next", async () => {
    const run = "reconciled-first";
    await plan(run, [work(run, "a")]);
    await setCellStatus(store.db, run, "a", "completed");
    await createAttemptKey(store.db, {
      run,
      cellId: "a",
      attempt: 0,
      models: [],
      capNanoUsd: null,
      exempt: false,
    });
    await admin.kv.jobs.put(StateKeys.attemptKey(run, "a", 0), "efk-plaintext-for-the-task");
    await store.db.query("INSERT INTO run_results (run_name, cell_id) VALUES ($1, 'a')", [run]);
    // The run's calls went through a gateway, so there is a reconciliation to do; the first try dies in it. The
    // call is still pending (its replica died mid-call): a reservation, never settled into the ledger.
    await store.db.query(
      `INSERT INTO gateway_spend_log (request_id, run_name, cell_id, cost_nano_usd, status)
       VALUES ($1, $2, 'a', 7, 'pending')`,
      [`rq-${run}`, run],
    );
    let failing = true;
    const db: Db = {
      kind: store.db.kind,
      close: () => store.db.close(),
      transaction: (fn) => store.db.transaction(fn),
      query(sql, params) {
        if (failing && sql.includes("FROM gateway_spend_log"))
          return Promise.reject(new Error("writer killed mid-reconciliation"));
        return store.db.query(sql, params);
      },
    };
    const actor = new Actor("results-writer", admin, log);
    const pw = new ProgressWriter({
      kv: admin.kv.progress,
      jobs: admin.kv.jobs,
      jsm: admin.jsm,
      db,
      log,
      actor,
    });
    await assert.rejects(pw.updateRun(run), /mid-reconciliation/);
    assert.notEqual((await progress(run))?.phase, "finished", "not finished before it is reconciled");
    failing = false;
    assert.equal(await pw.updateRun(run), true);
    assert.equal((await progress(run))?.phase, "finished");
    assert.equal(
      await count("SELECT count(*) AS n FROM reconciliation_results WHERE run_name = $1 AND flagged", [run]),
      1,
      "reconciled: the gateway's pending 7 nano-USD against an empty ledger is flagged",
    );
    assert.equal(
      await count("SELECT count(*) AS n FROM virtual_keys WHERE run_name = $1 AND revoked_at IS NULL", [run]),
      0,
      "the run's key is revoked",
    );
    const handed = await admin.kv.jobs.get(StateKeys.attemptKey(run, "a", 0));
    assert.ok(handed?.operation !== "PUT", "and no longer handed to tasks");
  });

  it("two replicas land a bulk run with totals that match the ledger (throughput diagnostic)", async (t) => {
    await writer("rw-c"); // a second replica sharing the durable consumers
    const run = "bulk";
    const n = 2_000;
    const cells = Array.from({ length: n }, (_, i) => work(run, `b${i}`));
    await plan(run, cells);
    const msgs = cells.flatMap((c) => [
      call(run, c.cellId, 0, 1_000),
      call(run, c.cellId, 0, 2_000),
      result(run, c.cellId, 0, "EMPTY_PATCH"),
    ]);
    const started = Date.now();
    await publishAll(msgs);
    await waitFor("bulk finished", async () => (await progress(run))?.phase === "finished", 120_000);
    const ms = Date.now() - started;
    t.diagnostic(`${store.db.kind}: ${msgs.length} messages (${n} attempts, ${2 * n} calls) in ${ms} ms`);
    const sum = await store.db.query<{ usd: string }>(
      "SELECT sum(total_cost)::text AS usd FROM run_results WHERE run_name = $1",
      [run],
    );
    assert.equal(usdToNanoNumber(sum.rows[0]?.usd), 3_000 * n);
  });

  it("a writer process killed with SIGKILL mid-run: the next one finishes with no lost and no doubled rows", async (t) => {
    // Only the child consumes while it lives.
    for (const w of writers.splice(0)) await w.stop();
    const child = spawn(
      process.execPath,
      ["--import", "tsx", fileURLToPath(new URL("./results-writer-child.ts", import.meta.url))],
      {
        env: { ...process.env, ...nats.env, DATABASE_URL: store.url },
        stdio: ["ignore", "pipe", "inherit"],
      },
    );
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    await new Promise<void>((resolve, reject) => {
      child.stdout?.on("data", (d: Buffer) => d.toString().includes("ready") && resolve());
      child.once("exit", (code) => reject(new Error(`child exited with ${code}`)));
    });
    const run = "killed";
    const n = 3_000;
    const cells = Array.from({ length: n }, (_, i) => work(run, `k${i}`));
    await plan(run, cells);
    const msgs = cells.flatMap((c) => [
      call(run, c.cellId, 0, 1_000),
      call(run, c.cellId, 0, 2_000),
      result(run, c.cellId, 0, "PATCH_READY"),
    ]);
    const published = publishAll(msgs);
    await waitFor("the child to land some rows", async () => {
      return (await count("SELECT count(*) AS n FROM run_results WHERE run_name = $1", [run])) >= 300;
    });
    child.kill("SIGKILL");
    await exited;
    await published;
    const before = await count("SELECT count(*) AS n FROM run_results WHERE run_name = $1", [run]);
    t.diagnostic(`killed after ${before} of ${n} rows`);
    await writer("rw-after-kill");
    await waitFor(
      "every row",
      async () => (await count("SELECT count(*) AS n FROM run_results WHERE run_name = $1", [run])) === n,
      120_000,
    );
    await waitFor(
      "every grade job",
      async () => {
        const info = await admin.jsm.streams.info(Streams.gradeJobs.name, {
          subjects_filter: Subjects.gradeJobs.one(run),
        });
        return (info.state.subjects?.[Subjects.gradeJobs.one(run)] ?? 0) >= n;
      },
      120_000,
    );
    await new Promise((r) => setTimeout(r, 1_000)); // a late duplicate would show up now
    const info = await admin.jsm.streams.info(Streams.gradeJobs.name, {
      subjects_filter: Subjects.gradeJobs.one(run),
    });
    assert.equal(info.state.subjects?.[Subjects.gradeJobs.one(run)], n, "exactly one grade job per attempt");
    // The ledger feed is consumed apart from the results (a run's `finished` waits for it the same way).
    await waitFor(
      "every call",
      async () => (await count("SELECT count(*) AS n FROM ledger_calls WHERE run_name = $1", [run])) >= 2 * n,
      60_000,
    );
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(await count("SELECT count(*) AS n FROM ledger_calls WHERE run_name = $1", [run]), 2 * n);
    assert.equal(
      await count(
        `SELECT count(*) AS n FROM run_results r WHERE run_name = $1 AND total_cost * 1000000000 <>
           (SELECT sum(cost_nano_usd) FROM ledger_calls l WHERE l.run_name = r.run_name AND l.cell_id = r.cell_id)`,
        [run],
      ),
      0,
      "every row's total equals its ledger",
    );
    assert.deepEqual(await getCellStatuses(store.db, run), { completed: n });
  });
});
