import type { Db } from "../db.js";
import { isLegacyShape, upgradeLegacy } from "./legacy.js";
import { type ColumnSpec, createTableSql, type Migration, type TableSpec } from "./types.js";

/*
 * The seed's results schema (run_results, run_state, run_metadata, phase_results) keyed on (run_name, cell_id),
 * plus reconciliation_results. Column names are the seed's; types are the PostgreSQL ones: money is
 * NUMERIC(20,9) USD, token counts BIGINT, the seed's REALs DOUBLE PRECISION, and the seed's ISO-text timestamps
 * stay TEXT so an old database converts without reparsing them. These specs are frozen with this migration:
 * later changes are new migrations.
 */

const text = (name: string, extra: Partial<ColumnSpec> = {}): ColumnSpec => ({
  name,
  type: "text",
  ...extra,
});
const int = (name: string): ColumnSpec => ({ name, type: "integer" });
const big = (name: string): ColumnSpec => ({ name, type: "bigint" });
const dbl = (name: string): ColumnSpec => ({ name, type: "double precision" });
const usd = (name: string): ColumnSpec => ({ name, type: "numeric(20,9)" });
const KEY = [text("cell_id", { notNull: true }), text("run_name", { notNull: true })];

export const RUN_RESULTS: TableSpec = {
  name: "run_results",
  columns: [
    ...KEY,
    ...["harness", "model", "task_id", "track"].map((n) => text(n)),
    int("repeat"),
    text("exit_class"),
    dbl("success"),
    text("error_class"),
    text("error_message"),
    ...["input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens"].map(
      big,
    ),
    usd("total_cost"),
    dbl("latency_ms"),
    dbl("time_to_first_attempt_ms"),
    int("num_api_calls"),
    int("num_tool_calls"),
    ...["diff", "test_output", "harness_metadata", "harness_stdout", "harness_stderr", "timestamp"].map((n) =>
      text(n),
    ),
    int("retry_count"),
    text("cost_mode"),
    // evalfleet's own columns, after the seed's.
    { name: "attempt", type: "integer", notNull: true, default: "0" },
    ...["status", "trace_id", "review_model"].map((n) => text(n)),
    usd("billable_cost"),
    ...["patch_hash", "patch_ref", "trajectory_ref", "grade_status"].map((n) => text(n)),
    { name: "resolved", type: "boolean" },
    { name: "grade_report", type: "jsonb" },
    { name: "graded_at", type: "timestamp with time zone" },
    dbl("verdict_score"),
    { name: "verdict", type: "jsonb" },
  ],
  constraints: ["CONSTRAINT run_results_pkey PRIMARY KEY (run_name, cell_id)"],
};

export const RUN_STATE: TableSpec = {
  name: "run_state",
  columns: [...KEY, ...["status", "started_at", "completed_at", "error"].map((n) => text(n))],
  constraints: ["CONSTRAINT run_state_pkey PRIMARY KEY (run_name, cell_id)"],
};

export const RUN_METADATA: TableSpec = {
  name: "run_metadata",
  columns: [
    text("run_name", { notNull: true }),
    ...["config_json", "harness_evaluator_version", "docker_image", "created_at"].map((n) => text(n)),
  ],
  constraints: ["CONSTRAINT run_metadata_pkey PRIMARY KEY (run_name)"],
};

export const PHASE_RESULTS: TableSpec = {
  name: "phase_results",
  columns: [
    { name: "id", type: "bigint", notNull: true, identity: true },
    ...KEY,
    ...["phase_name", "trace_id", "model", "model_role"].map((n) => text(n)),
    int("exit_code"),
    dbl("duration_ms"),
    int("timed_out"),
    big("input_tokens"),
    big("output_tokens"),
    usd("total_cost"),
    int("num_api_calls"),
    ...["error", "stdout", "stderr", "timestamp"].map((n) => text(n)),
    // evalfleet: which attempt produced the phase, so a redelivered result is recognised (see the unique index).
    { name: "attempt", type: "integer", notNull: true, default: "0" },
  ],
  constraints: [
    "CONSTRAINT phase_results_pkey PRIMARY KEY (id)",
    "CONSTRAINT phase_results_run_cell_fkey FOREIGN KEY (run_name, cell_id) REFERENCES run_results (run_name, cell_id)",
  ],
};

export const RECONCILIATION_RESULTS: TableSpec = {
  name: "reconciliation_results",
  columns: [
    ...KEY,
    big("ledger_nano_usd"),
    big("gateway_nano_usd"),
    big("harness_reported_nano_usd"),
    big("difference_nano_usd"),
    { name: "flagged", type: "boolean", notNull: true, default: "false" },
    { name: "created_at", type: "timestamp with time zone", notNull: true, default: "now()" },
  ],
  constraints: ["CONSTRAINT reconciliation_results_pkey PRIMARY KEY (run_name, cell_id)"],
};

export const CORE_TABLES = [
  RUN_RESULTS,
  RUN_STATE,
  RUN_METADATA,
  PHASE_RESULTS,
  RECONCILIATION_RESULTS,
] as const;

async function up(tx: Db, log: Parameters<Migration["up"]>[1]): Promise<void> {
  if (await isLegacyShape(tx)) {
    log.info("results store: legacy cell_id-keyed tables found, migrating to (run_name, cell_id) in place");
    await upgradeLegacy(tx, CORE_TABLES, log);
  }
  for (const t of CORE_TABLES) await tx.query(createTableSql(t));
  await tx.query(
    "CREATE UNIQUE INDEX IF NOT EXISTS phase_results_cell_attempt_phase ON phase_results (run_name, cell_id, attempt, phase_name)",
  );
}

export const migration001: Migration = { version: 1, name: "results_core", up };
