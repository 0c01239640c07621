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
  /**
   * Attempt results published by a harness task when it exits. The attempt number is in the subject so a task's
   * NATS user can be allowed exactly its own attempt's subject (and a consumer refuses a body naming another).
   */
  attempts: {
    all: "attempts.>",
    run: (run: string) => `attempts.${encodeToken(run)}.>`,
    one: (run: string, cell: string, attempt: number) =>
      `attempts.${encodeToken(run)}.${encodeToken(cell)}.${attemptToken(attempt)}`,
  },
  /** One message per provider call, written by the shim (and the judge), per attempt like `attempts`. */
  ledger: {
    all: "ledger.>",
    run: (run: string) => `ledger.${encodeToken(run)}.>`,
    one: (run: string, cell: string, attempt: number) =>
      `ledger.${encodeToken(run)}.${encodeToken(cell)}.${attemptToken(attempt)}`,
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
  /** every run's progress key */
  allRuns: "run.*",
  cell: (run: string, cell: string) => `cell.${encodeToken(run)}.${encodeToken(cell)}`,
  cellsOfRun: (run: string) => `cell.${encodeToken(run)}.>`,
  actor: (name: string, id: string) => `actor.${encodeToken(name)}.${encodeToken(id)}`,
  pool: (run: string, pool: string) => `pool.${encodeToken(run)}.${encodeToken(pool)}`,
  poolsOfRun: (run: string) => `pool.${encodeToken(run)}.>`,
  /** A submission rejected before a run name could be read, keyed by its stream sequence. */
  rejected: (seq: number) => `rejected.${seq}`,
} as const;

/** KV keys in the `budgets`, `jobs` and `control` buckets. A task fetches its job by reference from `jobs`. */
export const StateKeys = {
  budget: (run: string) => `run.${encodeToken(run)}`,
  job: (run: string, cell: string) => `cell.${encodeToken(run)}.${encodeToken(cell)}`,
  /** `jobs` bucket: every cell's work of a run (and, in `budgets`, every cell's launch record: same key shape) */
  cellsOfRun: (run: string) => `cell.${encodeToken(run)}.>`,
  jobRun: (run: string) => `run.${encodeToken(run)}`,
  /** `jobs` bucket: every run's config (every planned run has one until it is pruned) */
  allJobRuns: "run.*",
  jobTask: (run: string, task: string) => `task.${encodeToken(run)}.${encodeToken(task)}`,
  tasksOfRun: (run: string) => `task.${encodeToken(run)}.>`,
  /**
   * One attempt's gateway key (plaintext), minted by the dispatcher at launch, readable only by that attempt's task;
   * deleted (and the key revoked) when the attempt ends.
   */
  attemptKey: (run: string, cell: string, attempt: number) =>
    `key.${encodeToken(run)}.${encodeToken(cell)}.${attemptToken(attempt)}`,
  /** Every attempt key of a run (deleted when the run ends). */
  attemptKeysOfRun: (run: string) => `key.${encodeToken(run)}.>`,
  control: (run: string) => `run.${encodeToken(run)}`,
  /** `budgets` bucket: the dispatcher's claim of one attempt (created once; a second create fails). */
  claim: (run: string, cell: string, attempt: number) =>
    `claim.${encodeToken(run)}.${encodeToken(cell)}.${attemptToken(attempt)}`,
  claimsOfRun: (run: string) => `claim.${encodeToken(run)}.>`,
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
  ) => `${BlobNames.attemptPrefix(run, cell, attempt)}${file}`,
  /** Every blob of one attempt starts with this; a reference outside it is another attempt's (or forged). */
  attemptPrefix: (run: string, cell: string, attempt: number) =>
    `${encodeToken(run)}/${encodeToken(cell)}/${attemptToken(attempt)}/`,
  /** Every blob of one run starts with this. */
  runPrefix: (run: string) => `${encodeToken(run)}/`,
  /** True when `name` is one of the attempt's own blobs (a file directly under its prefix). */
  ownedBy: (name: string, run: string, cell: string, attempt: number): boolean => {
    const prefix = BlobNames.attemptPrefix(run, cell, attempt);
    return name.startsWith(prefix) && /^[A-Za-z0-9_.-]+$/.test(name.slice(prefix.length));
  },
} as const;

/**
 * The NATS and JetStream API subjects a client's KV, object-store and direct-get calls use, for the permissions of a
 * per-attempt NATS user (plane/nats-auth.ts): one place that knows how @nats-io/kv and @nats-io/obj name them.
 */
export const ApiSubjects = {
  /** a KV key's subject (a put publishes there) */
  kvKey: (bucket: string, key: string) => `$KV.${bucket}.${key}`,
  /** a KV get by direct get: the key is in the subject, so a permission can name one key */
  kvDirectGet: (bucket: string, key: string) => `$JS.API.DIRECT.GET.KV_${bucket}.$KV.${bucket}.${key}`,
  /** the message-get API of a bucket's stream: the key is in the body, so no task may have it */
  kvMsgGet: (bucket: string) => `$JS.API.STREAM.MSG.GET.KV_${bucket}`,
  /** an object's metadata subject (its name base64url-encoded with padding, as @nats-io/obj writes it) */
  objectMeta: (store: string, name: string) =>
    `$O.${store}.M.${Buffer.from(name, "utf8").toString("base64").replace(/\+/g, "-").replace(/\//g, "_")}`,
  /**
   * An object's chunks: `id` is the object's `nuid`. A task's blobs use `<run>.<cell>.<attempt>.<nuid>` so its
   * user can be allowed exactly its own chunk subjects.
   */
  objectChunks: (store: string, id: string) => `$O.${store}.C.${id}`,
  /** the chunk-id prefix of one attempt's blobs (see objectChunks) */
  attemptChunkId: (run: string, cell: string, attempt: number, nuid: string) =>
    `${encodeToken(run)}.${encodeToken(cell)}.${attemptToken(attempt)}.${nuid}`,
  /** the inbox prefix of one attempt's NATS user: replies to its requests come there and nowhere else */
  attemptInbox: (run: string, cell: string, attempt: number) =>
    `_INBOX_ATTEMPT.${encodeToken(run)}.${encodeToken(cell)}.${attemptToken(attempt)}`,
} as const;
