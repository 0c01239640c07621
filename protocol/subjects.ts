import { attemptToken, encodeToken } from "./names.js";

/**
 * Every subject evalfleet uses, defined once: a wildcard for consumers and stream definitions, and a builder that
 * encodes user-supplied names into single tokens. Nothing outside protocol/ writes a subject string.
 */
export const Subjects = {
  /** Run submissions: a plain core publish (`nats pub runs.submit '<json or yaml>'`), captured by the RUNS stream. */
  runSubmit: "runs.submit",
  /** Run lifecycle events a user can watch: accepted, rejected, finished, budget skips, reconciliation flags. */
  events: {
    all: "events.>",
    run: (run: string) => `events.${encodeToken(run)}`,
    /** Submissions rejected before a run name could be read (`=` never starts an encoded token's letters). */
    rejected: "events.=rejected",
  },
  /** Cell work for the dispatcher, one message per cell, per pool so each pool can be paced apart. */
  cells: {
    all: "cells.>",
    run: (run: string) => `cells.${encodeToken(run)}.*`,
    one: (run: string, pool: string) => `cells.${encodeToken(run)}.${encodeToken(pool)}`,
  },
  /** Attempt results published by a harness task when it exits. */
  attempts: {
    all: "attempts.>",
    one: (run: string, cell: string) => `attempts.${encodeToken(run)}.${encodeToken(cell)}`,
  },
  /** One message per provider call, written by the shim. */
  ledger: {
    all: "ledger.>",
    run: (run: string) => `ledger.${encodeToken(run)}.*`,
    one: (run: string, cell: string) => `ledger.${encodeToken(run)}.${encodeToken(cell)}`,
  },
  /** Grading work and results. */
  gradeJobs: { all: "grade.jobs.>", one: (run: string) => `grade.jobs.${encodeToken(run)}` },
  gradeResults: { all: "grade.results.>", one: (run: string) => `grade.results.${encodeToken(run)}` },
  /** Judge work (open_ended tasks) and verdicts. */
  judgeJobs: { all: "judge.jobs.>", one: (run: string) => `judge.jobs.${encodeToken(run)}` },
  judgeResults: { all: "judge.results.>", one: (run: string) => `judge.results.${encodeToken(run)}` },
  /** Operator commands for a run (drain, cancel, resume); request/reply, answered by the dispatcher. */
  control: {
    all: "control.>",
    one: (run: string, verb: ControlVerb) => `control.${encodeToken(run)}.${verb}`,
  },
  /** Session-ending signal to one attempt's task entrypoint (cap reached, cancel). */
  attemptSignal: (run: string, cell: string, attempt: number) =>
    `signal.${encodeToken(run)}.${encodeToken(cell)}.${attemptToken(attempt)}`,
} as const;

export type ControlVerb = "drain" | "cancel" | "resume";

/** KV keys in the `progress` bucket. */
export const ProgressKeys = {
  run: (run: string) => `run.${encodeToken(run)}`,
  cell: (run: string, cell: string) => `cell.${encodeToken(run)}.${encodeToken(cell)}`,
  cellsOfRun: (run: string) => `cell.${encodeToken(run)}.>`,
  actor: (name: string, id: string) => `actor.${encodeToken(name)}.${encodeToken(id)}`,
  pool: (run: string, pool: string) => `pool.${encodeToken(run)}.${encodeToken(pool)}`,
  /** A submission rejected before a run name could be read, keyed by its stream sequence. */
  rejected: (seq: number) => `rejected.${seq}`,
} as const;

/** KV keys in the `budgets`, `jobs` and `control` buckets. A task fetches its job by reference from `jobs`. */
export const StateKeys = {
  budget: (run: string) => `run.${encodeToken(run)}`,
  job: (run: string, cell: string) => `cell.${encodeToken(run)}.${encodeToken(cell)}`,
  jobRun: (run: string) => `run.${encodeToken(run)}`,
  jobTask: (run: string, task: string) => `task.${encodeToken(run)}.${encodeToken(task)}`,
  /** the run's gateway key (plaintext), readable only by the run's own tasks; deleted when the run's keys are revoked */
  runKey: (run: string) => `key.${encodeToken(run)}`,
  control: (run: string) => `run.${encodeToken(run)}`,
  /** `budgets` bucket: the dispatcher's claim of one attempt (created once; a second create fails). */
  claim: (run: string, cell: string, attempt: number) =>
    `claim.${encodeToken(run)}.${encodeToken(cell)}.${attemptToken(attempt)}`,
  /** `budgets` bucket: which generation and attempt of a cell the dispatcher launched last, and whether it ended. */
  cellLaunch: (run: string, cell: string) => `cell.${encodeToken(run)}.${encodeToken(cell)}`,
  pacerPool: (pool: string) => `pool.${encodeToken(pool)}`,
} as const;

/** Object-store names for one attempt's blobs. */
export const BlobNames = {
  attempt: (
    run: string,
    cell: string,
    attempt: number,
    file: "patch.diff" | "trajectory.jsonl" | "stdout.txt" | "stderr.txt" | "test_output.txt",
  ) => `${encodeToken(run)}/${encodeToken(cell)}/${attemptToken(attempt)}/${file}`,
} as const;

/** The pool an attempt draws admission from: one (harness, model) pair, i.e. one alias. */
export function poolId(harness: string, model: string): string {
  return `${harness}__${model}`;
}
