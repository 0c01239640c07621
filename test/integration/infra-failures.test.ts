/**
 * Honest denominators through the real plane (planner, dispatcher, results-writer, report): an attempt the
 * environment ended — a task whose container never started, infrastructure retries exhausted — lands a row as
 * INFRA_FAILURE, unscored, counted apart in the progress key and the report, and kept out of the resolved rate
 * unless the run says `infra_failures: as_failures`. `timeout_policy: grade` ends a timed-out attempt at once.
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { SimBackend } from "../../actors/dispatcher/backends/sim.js";
import type { JobRef, LaunchBackend, StopClass } from "../../actors/dispatcher/backends/types.js";
import type { AttemptStatus, RunProgress } from "../../protocol/messages.js";
import { ProgressKeys } from "../../protocol/subjects.js";
import { buildReport } from "../../report/aggregate.js";
import { formatTable } from "../../report/format.js";
import { loadReportInput } from "../../report/load.js";
import { type DispatchRig, startRig, waitFor } from "./dispatcher-fixture.js";

let rig: DispatchRig;
const launches: JobRef[] = [];

/** Per task: how its launch goes. */
const taskOf = (ref: JobRef) => ref.cellId.split("__")[2] ?? "";
const OUTCOME: Record<string, AttemptStatus> = { fine: "EMPTY_PATCH", slow: "TIMEOUT" };

/** The sim backend, except that `never` tasks fail to start (image pull) and `flaky-infra` ones always retryably. */
class InfraBackend implements LaunchBackend {
  readonly name = "infra-test";
  constructor(private readonly sim: SimBackend) {}
  async launch(refs: JobRef[]) {
    launches.push(...refs);
    const out: Array<{ ref: JobRef; handle?: string; error?: StopClass }> = [];
    for (const ref of refs) {
      const task = taskOf(ref);
      if (task === "never")
        out.push({
          ref,
          error: { kind: "fatal", reason: "image pull: manifest unknown", neverStarted: true },
        });
      else if (task === "flaky-infra")
        out.push({ ref, error: { kind: "retryable", reason: "no capacity", neverStarted: true } });
      else out.push(...(await this.sim.launch([ref])));
    }
    return out;
  }
  observe(handles: string[]) {
    return this.sim.observe(handles);
  }
  stop(handles: string[], reason: string) {
    return this.sim.stop(handles, reason);
  }
  close() {
    return this.sim.close();
  }
}

before(async () => {
  rig = await startRig(["never", "flaky-infra", "fine", "slow"].map((id) => ({ id })));
  const simPlane = await rig.plane("infra-sim");
  const sim = new SimBackend({
    plane: simPlane,
    calls: 0,
    thinkMs: 50,
    outcome: (ref) => OUTCOME[taskOf(ref)] ?? "EMPTY_PATCH",
  });
  await rig.dispatcher({ backend: new InfraBackend(sim), extra: { retryDelaysMs: [50, 50, 50] } });
  await rig.resultsWriter({ progressIntervalMs: 50 });
});

after(async () => {
  await rig.close();
});

async function finished(run: string): Promise<RunProgress> {
  return waitFor(
    `${run} finished`,
    async () => {
      const e = await rig.client.kv.progress.get(ProgressKeys.run(run));
      const p = e && e.length > 0 ? e.json<RunProgress>() : undefined;
      return p?.phase === "finished" ? p : undefined;
    },
    60_000,
  );
}

const config = (name: string, extra: Record<string, unknown> = {}) => ({
  name,
  harnesses: [{ name: "h", adapter: "sim" }],
  models: [{ name: "claude-sonnet-4-5" }],
  tasks: ["never", "flaky-infra", "fine"],
  parallel_runs: 4,
  budget_usd: 10,
  unvalidated: true,
  ...extra,
});

describe("infrastructure failures are counted apart", () => {
  it("a task that never started and exhausted infrastructure retries land unscored, apart from the model's", async () => {
    await rig.submit(config("infra-apart"));
    const p = await finished("infra-apart");
    assert.equal(p.infraFailures, 2);
    const rows = await rig.store.db.query<{
      cell_id: string;
      status: string;
      error_class: string;
      success: number | null;
      exit_class: string;
    }>(
      "SELECT cell_id, status, error_class, success, exit_class FROM run_results WHERE run_name = $1 ORDER BY cell_id",
      ["infra-apart"],
    );
    const by = new Map(rows.rows.map((r) => [r.cell_id.split("__")[2], r]));
    for (const t of ["never", "flaky-infra"]) {
      assert.equal(by.get(t)?.status, "INFRA_FAILURE", t);
      assert.equal(by.get(t)?.error_class, "infrastructure", t);
      assert.equal(by.get(t)?.success, null, `${t}: no score`);
      assert.equal(by.get(t)?.exit_class, "retryable_kill", t);
    }
    assert.equal(Number(by.get("fine")?.success), 0, "the model's own empty patch is scored 0");
    // never: one launch (fatal); flaky-infra: the first try and three retries.
    const n = (t: string) => launches.filter((l) => l.runName === "infra-apart" && taskOf(l) === t).length;
    assert.deepEqual([n("never"), n("flaky-infra")], [1, 4]);

    const report = buildReport(await loadReportInput(rig.store.db, "infra-apart"));
    assert.equal(report.totals.infraFailures, 2);
    assert.equal(report.totals.scored, 1, "only the model's outcome is in the denominator");
    assert.equal(report.groups[0]?.resolvedRate, 0);
    assert.match(formatTable(report), /Infrastructure failures: 2 .*kept out of the resolved rate/);
  });

  it("infra_failures: as_failures scores them as unresolved, and the report says so", async () => {
    await rig.submit(config("infra-strict", { infra_failures: "as_failures" }));
    await finished("infra-strict");
    const report = buildReport(await loadReportInput(rig.store.db, "infra-strict"));
    assert.equal(report.totals.infraFailures, 2);
    assert.equal(report.totals.scored, 3);
    assert.equal(report.runOptions.infraFailures, "as_failures");
    assert.match(formatTable(report), /COUNTED AS FAILURES/);
    assert.match(formatTable(report), /UNVALIDATED/);
  });

  it("timeout_policy: grade ends a timed-out attempt at once; retry (default) relaunches it", async () => {
    await rig.submit(config("timeout-grade", { tasks: ["slow"], timeout_policy: "grade" }));
    await rig.submit(config("timeout-retry", { tasks: ["slow"] }));
    await finished("timeout-grade");
    await finished("timeout-retry");
    const n = (run: string) => launches.filter((l) => l.runName === run).length;
    assert.equal(n("timeout-grade"), 1);
    assert.equal(n("timeout-retry"), 4);
    const rows = await rig.store.db.query<{ run_name: string; error_class: string }>(
      "SELECT run_name, error_class FROM run_results WHERE run_name LIKE 'timeout-%' ORDER BY run_name",
    );
    assert.deepEqual(
      rows.rows.map((r) => [r.run_name, r.error_class]),
      [
        ["timeout-grade", "timeout"],
        ["timeout-retry", "retry_exhausted"],
      ],
    );
  });
});
