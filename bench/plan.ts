/**
 * bench:plan — how fast the planner expands and persists.
 *  1. Expansion (and dry-run rendering) of a 2,294-task × 5-harness × 3-model × 5-repeat matrix: 172,050 cells.
 *  2. The planner's persist + publish of a 20,000-cell run on a fresh nats-server and PostgreSQL (DATABASE_URL, else
 *     PGlite), against two ceilings measured in the same run: pipelined JetStream publish of 20,000 messages of the
 *     same size, and batched INSERT of 20,000 run_state rows.
 * Last line: one JSON object with the figures.
 */
import { handleSubmission } from "../actors/planner/actor.js";
import { buildMatrix } from "../actors/planner/matrix.js";
import { Actor } from "../actors/runtime/actor.js";
import { dryRunTable } from "../cli/commands/plan.js";
import { silentLogger } from "../lib/log.js";
import { RunConfigSchema, TaskSpecSchema } from "../protocol/config.js";
import { measureInsertCeiling, measurePublishCeiling, startBenchPlane } from "./common.js";

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? 0;
}

async function expansion() {
  const config = RunConfigSchema.parse({
    name: "big",
    harnesses: ["claude-code", "codex", "opencode", "mini-swe-agent", "aider"].map((name) => ({
      name,
      adapter: "command",
    })),
    models: ["claude-sonnet-4-5", "gpt-5", "gemini-2.5-pro"].map((name) => ({ name })),
    tasks: ["*"],
    repeats: 5,
  });
  const tasks = Array.from({ length: 2294 }, (_, i) =>
    TaskSpecSchema.parse({ id: `repo__repo-${10000 + i}` }),
  );
  const expandMs: number[] = [];
  const dryRunMs: number[] = [];
  let cells = 0;
  for (let i = 0; i < 7; i++) {
    const t0 = performance.now();
    const matrix = buildMatrix(config, tasks);
    const t1 = performance.now();
    dryRunTable({ config, tasks, cells: matrix, libraryDir: ".", unvalidated: [] });
    const t2 = performance.now();
    expandMs.push(t1 - t0);
    dryRunMs.push(t2 - t1);
    cells = matrix.length;
  }
  return { cells, expandMs: median(expandMs), dryRunMs: median(dryRunMs) };
}

async function persistAndPublish() {
  // 20,000 cells: 1,000 tasks × 5 harnesses × 2 models × 2 repeats
  const bp = await startBenchPlane("bench-plan", 1000, 4);
  const { store, lib } = bp;
  try {
    const plane = await bp.plane("bench-plan");
    const run = (name: string) =>
      JSON.stringify({
        name,
        harnesses: ["a", "b", "c", "d", "e"].map((n) => ({ name: n, adapter: "command" })),
        models: [{ name: "m1" }, { name: "m2" }],
        tasks: ["*"],
        task_library_path: lib,
        repeats: 2,
        // synthetic tasks with nothing to grade: measured as planned, not gold-validated
        unvalidated: true,
      });
    const actor = new Actor("planner", plane, silentLogger());
    const opts = { plane, db: store.db, log: silentLogger(), libraryRoots: [lib] };
    // warm-up on a small run so connection set-up is not measured
    await handleSubmission(opts, actor, new TextEncoder().encode(run("warm")), 1);
    const t0 = performance.now();
    const outcome = await handleSubmission(opts, actor, new TextEncoder().encode(run("bench-20k")), 2);
    const plannerMs = performance.now() - t0;
    if (outcome.kind !== "planned") throw new Error(`bench run was rejected: ${outcome.message}`);

    // The ceilings: as many same-size messages as the planner published, as many run_state rows as it wrote.
    const publishCeilingMs = await measurePublishCeiling(plane, outcome.published);
    const insertCeilingMs = await measureInsertCeiling(store.db, outcome.totalCells);

    await actor.stop();
    return {
      db: store.db.kind,
      cells: outcome.totalCells,
      plannerMs,
      plannerCellsPerSec: outcome.totalCells / (plannerMs / 1000),
      publishCeilingPerSec: outcome.published / (publishCeilingMs / 1000),
      insertCeilingRowsPerSec: outcome.totalCells / (insertCeilingMs / 1000),
      publishCeilingMs,
      insertCeilingMs,
    };
  } finally {
    await bp.close();
  }
}

const exp = await expansion();
console.log(
  `expand ${exp.cells} cells: ${exp.expandMs.toFixed(1)} ms (median of 7); dry-run table: ${exp.dryRunMs.toFixed(1)} ms`,
);
const p = await persistAndPublish();
console.log(
  `planner persist + KV jobs + publish of ${p.cells} cells on ${p.db}: ${p.plannerMs.toFixed(0)} ms = ${p.plannerCellsPerSec.toFixed(0)} cells/s`,
);
console.log(
  `ceilings in the same run: JetStream pipelined publish ${p.publishCeilingPerSec.toFixed(0)} msg/s, batched INSERT ${p.insertCeilingRowsPerSec.toFixed(0)} rows/s`,
);
// The planner writes two JetStream messages per cell (the KV job record and the cell-work message) and one row;
// its ceiling is that much work at the measured rates, done one after the other.
const MSGS_PER_CELL = 2;
const serialCeilingMs = MSGS_PER_CELL * p.publishCeilingMs + p.insertCeilingMs;
console.log(
  JSON.stringify({
    expand_cells: exp.cells,
    expand_ms: Number(exp.expandMs.toFixed(2)),
    dry_run_ms: Number(exp.dryRunMs.toFixed(2)),
    planner_cells: p.cells,
    planner_db: p.db,
    planner_ms: Math.round(p.plannerMs),
    planner_cells_per_s: Math.round(p.plannerCellsPerSec),
    publish_ceiling_msgs_per_s: Math.round(p.publishCeilingPerSec),
    insert_ceiling_rows_per_s: Math.round(p.insertCeilingRowsPerSec),
    jetstream_msgs_per_cell: MSGS_PER_CELL,
    planner_rate_vs_ceiling: Number((serialCeilingMs / p.plannerMs).toFixed(3)),
  }),
);
