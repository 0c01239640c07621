import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { z } from "zod";
import { JobRefEnv } from "../protocol/task.js";
import { type NatsSettings, natsServerEnv } from "./nats.js";
import { boolText, defineGroup, enumText, optionalText, requiredText, setting } from "./setting.js";

/** A harness task's settings (`evalfleet task`): its job reference, where calls go, its folders, its pacer. */

export interface TaskSettings {
  ref: { run: string; cell: string; attempt: number; pool: string };
  /** the run's gateway key when given (else the task reads the one the planner left in KV) */
  runKey?: string;
  workRoot: string;
  mirrorRoot: string;
  /** base URL git mirrors are cloned from (`<base>/<owner>/<name>`), when tasks name a remote repository */
  gitRemoteBase?: string;
  keepWorkdir: boolean;
  /** `fleet`: every call admitted by its pool's fleet pacer over NATS; `none`: the gateway paces */
  pacer: "none" | "fleet";
  /** with the fleet pacer: this task may own a pool no one owns */
  pacerOwn: boolean;
  /** a folder shared with a harness-runner container (two-container attempts): the harness runs there */
  harnessRunner?: string;
}

export const jobRefGroup = defineGroup({
  name: "job",
  doc: "The job reference every launch backend hands a task (nothing else: the task fetches the rest).",
  settings: {
    run: setting({
      env: JobRefEnv.run,
      flag: "run",
      doc: "run name (given per launch)",
      schema: requiredText("the launch backend sets it, or pass --run"),
    }),
    cell: setting({
      env: JobRefEnv.cell,
      flag: "cell",
      doc: "cell id (given per launch)",
      schema: requiredText("the launch backend sets it, or pass --cell"),
    }),
    attempt: setting({
      env: JobRefEnv.attempt,
      flag: "attempt",
      doc: "attempt number (given per launch)",
      schema: z
        .string({ error: "is not set: the launch backend sets it, or pass --attempt" })
        .regex(/^\d{1,9}$/, { error: "must be a non-negative whole number" })
        .transform(Number),
    }),
    pool: setting({
      env: JobRefEnv.pool,
      doc: "the pacer pool the attempt draws admission from (given per launch)",
      schema: z.string().min(1),
      default: "default",
    }),
  },
  compile: (v): TaskSettings["ref"] => ({ run: v.run, cell: v.cell, attempt: v.attempt, pool: v.pool }),
});

export const taskGroup = defineGroup({
  name: "task",
  doc: "The harness task's run key, folders and pacing.",
  settings: {
    runKey: setting({
      env: "EVALFLEET_RUN_KEY",
      doc: "the run's gateway key (default: the key the planner left for the run in KV jobs)",
      schema: optionalText,
      secret: true,
    }),
    workdir: setting({
      env: "EVALFLEET_WORKDIR",
      flag: "workdir",
      doc: "root of attempt workdirs",
      schema: optionalText,
      defaultDoc: "$TMPDIR/evalfleet-work (`up`: <state-dir>/work)",
    }),
    mirrors: setting({
      env: "EVALFLEET_GIT_MIRRORS",
      doc: "the per-repository git mirror cache",
      schema: optionalText,
      defaultDoc: "$TMPDIR/evalfleet-mirrors (`up`: <state-dir>/mirrors)",
    }),
    gitRemoteBase: setting({
      env: "EVALFLEET_GIT_REMOTE_BASE",
      doc: "base URL mirrors of remote repositories are cloned from (`<base>/<owner>/<name>`)",
      schema: optionalText,
    }),
    keepWorkdir: setting({
      env: "EVALFLEET_KEEP_WORKDIR",
      flag: "keep-workdir",
      doc: "keep the attempt's folder after publishing (debugging)",
      schema: boolText,
      default: "0",
    }),
    pacer: setting({
      env: "EVALFLEET_PACER",
      doc: "`fleet`: calls admitted by the pool's fleet pacer over NATS; `none`: the gateway paces",
      schema: enumText(["none", "fleet"] as const),
      default: "none",
    }),
    harnessRunner: setting({
      env: "EVALFLEET_HARNESS_RUNNER",
      doc: "a folder shared with a `harness-runner` container: the harness runs there, in its own container (ECS)",
      schema: optionalText,
    }),
    pacerOwn: setting({
      env: "EVALFLEET_PACER_OWN",
      doc: "with the fleet pacer: this task may own a pool no one owns",
      schema: boolText,
      default: "0",
    }),
  },
  compile: (v, ctx): Omit<TaskSettings, "ref"> => {
    // A local plane keeps its tasks' folders with the rest of its state; a task alone uses the temp folder.
    const stateDir = ctx.value<string>("EVALFLEET_STATE_DIR");
    const out: Omit<TaskSettings, "ref"> = {
      workRoot: resolve(v.workdir ?? (stateDir ? join(stateDir, "work") : join(tmpdir(), "evalfleet-work"))),
      mirrorRoot: resolve(
        v.mirrors ?? (stateDir ? join(stateDir, "mirrors") : join(tmpdir(), "evalfleet-mirrors")),
      ),
      keepWorkdir: v.keepWorkdir,
      pacer: v.pacer,
      pacerOwn: v.pacerOwn,
    };
    if (v.runKey !== undefined) out.runKey = v.runKey;
    if (v.gitRemoteBase !== undefined) out.gitRemoteBase = v.gitRemoteBase;
    if (v.harnessRunner !== undefined) out.harnessRunner = v.harnessRunner;
    return out;
  },
});

/** Every variable the task role reads, so a launcher can drop the ones it does not mean to hand on. */
export const TASK_VARIABLES: readonly string[] = [
  ...Object.values(jobRefGroup.settings).map((s) => s.env),
  ...Object.values(taskGroup.settings).map((s) => s.env),
];

/**
 * The environment a launcher gives a task it starts as a process (besides the job reference): the inverse of the
 * task role's schema, so the variable names live here only.
 */
export function taskEnv(o: {
  nats: NatsSettings;
  gatewayUrl: string;
  logLevel?: string;
  workRoot?: string;
  mirrorRoot?: string;
  gitRemoteBase?: string;
  pacer?: "none" | "fleet";
  pacerOwn?: boolean;
  keepWorkdir?: boolean;
}): Record<string, string> {
  // Where NATS is, never how to log in: each task gets its own attempt's credential from its launcher.
  const env: Record<string, string> = { ...natsServerEnv(o.nats), EVALFLEET_GATEWAY_URL: o.gatewayUrl };
  if (o.logLevel) env.EVALFLEET_LOG_LEVEL = o.logLevel;
  if (o.workRoot) env.EVALFLEET_WORKDIR = o.workRoot;
  if (o.mirrorRoot) env.EVALFLEET_GIT_MIRRORS = o.mirrorRoot;
  if (o.gitRemoteBase) env.EVALFLEET_GIT_REMOTE_BASE = o.gitRemoteBase;
  if (o.pacer) env.EVALFLEET_PACER = o.pacer;
  if (o.pacerOwn) env.EVALFLEET_PACER_OWN = "1";
  if (o.keepWorkdir) env.EVALFLEET_KEEP_WORKDIR = "1";
  return env;
}
