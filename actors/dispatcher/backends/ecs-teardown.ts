import { DescribeTasksCommand, ListTasksCommand } from "@aws-sdk/client-ecs";
import { type Logger, silentLogger } from "../../../lib/log.js";
import { type Clock, systemClock } from "./clock.js";
import { type EcsApi, type EcsBuckets, ecsBuckets, stopTasks } from "./ecs.js";
import { refFromTags, startedByFor } from "./ecs-ids.js";
import { Limiter } from "./limiter.js";

export interface TeardownOptions {
  ecs: EcsApi;
  cluster: string;
  /** Only this run's tasks; all evalfleet harness tasks when omitted. */
  run?: string;
  /** Eval-tier capacity to scale to zero (the grader-supervisor's AsgCapacity per Auto Scaling group). */
  evalGroups?: readonly EvalCapacity[];
  /**
   * Cancels the run in NATS (the dispatchers' control), so no live dispatcher launches again what teardown stops;
   * wired by the caller. Called first, for every run teardown concerns.
   */
  cancelRun?: (run: string) => Promise<string>;
  /** Revokes a run's keys everywhere they live (PostgreSQL, the KV copy tasks read); says what it revoked. */
  revokeRunKeys?: (run: string) => Promise<string>;
  dryRun?: boolean;
  clock?: Clock;
  buckets?: EcsBuckets;
  log?: Logger;
}

/** One eval-tier group's capacity, as far as teardown needs it. */
export interface EvalCapacity {
  readonly groupName: string;
  current(): Promise<{ desired: number }>;
  /** returns the capacity set */
  setDesired(desired: number): Promise<number>;
}

export interface TeardownReport {
  cluster: string;
  run: string | null;
  found: number;
  stopped: string[];
  failed: Array<{ handle: string; error: string }>;
  runs: string[];
  cancelled: Array<{ run: string; how: string }>;
  notCancelled: Array<{ run: string; reason: string }>;
  keysRevoked: Array<{ run: string; what: string }>;
  keysNotRevoked: Array<{ run: string; reason: string }>;
  scaled: Array<{ asg: string; from: number; to: number }>;
  dryRun: boolean;
}

/** Every harness task still alive in the cluster (of one run, or all), with the run each belongs to. */
export async function listHarnessTasks(
  ecs: EcsApi,
  cluster: string,
  run: string | undefined,
  buckets: EcsBuckets,
): Promise<Array<{ arn: string; run: string }>> {
  const arns: string[] = [];
  let nextToken: string | undefined;
  do {
    await buckets.describe.take(1);
    const out = await ecs.send(
      new ListTasksCommand({
        cluster,
        desiredStatus: "RUNNING",
        maxResults: 100,
        ...(run === undefined ? {} : { startedBy: startedByFor(run) }),
        ...(nextToken === undefined ? {} : { nextToken }),
      }),
    );
    arns.push(...(out.taskArns ?? []));
    nextToken = out.nextToken;
  } while (nextToken);

  // Tags decide: services' tasks (actors, gateway, eval workers) carry no run tag and are left alone.
  const found: Array<{ arn: string; run: string }> = [];
  for (let i = 0; i < arns.length; i += 100) {
    await buckets.describe.take(1);
    const out = await ecs.send(
      new DescribeTasksCommand({ cluster, tasks: arns.slice(i, i + 100), include: ["TAGS"] }),
    );
    for (const t of out.tasks ?? []) {
      const ref = refFromTags(t.tags);
      if (!t.taskArn || !ref || (run !== undefined && ref.runName !== run)) continue;
      found.push({ arn: t.taskArn, run: ref.runName });
    }
  }
  return found;
}

/**
 * Cancel the run in NATS first (so no dispatcher launches again), stop every harness task of the run (or of all
 * runs), revoke the run's keys everywhere, and scale the eval tier to zero. Every step is reported, done or not.
 */
export async function teardown(opts: TeardownOptions): Promise<TeardownReport> {
  const clock = opts.clock ?? systemClock;
  const buckets = opts.buckets ?? ecsBuckets(clock);
  const log = opts.log ?? silentLogger();
  const dryRun = opts.dryRun ?? false;
  const report: TeardownReport = {
    cluster: opts.cluster,
    run: opts.run ?? null,
    found: 0,
    stopped: [],
    failed: [],
    runs: [],
    cancelled: [],
    notCancelled: [],
    keysRevoked: [],
    keysNotRevoked: [],
    scaled: [],
    dryRun,
  };

  // One run named: cancel it before looking at its tasks, so none is launched between the list and the stop.
  if (opts.run !== undefined && !dryRun) await cancel(opts, opts.run, report);
  const tasks = await listHarnessTasks(opts.ecs, opts.cluster, opts.run, buckets);
  const runs = opts.run !== undefined ? [opts.run] : [...new Set(tasks.map((t) => t.run))].sort();
  report.found = tasks.length;
  report.runs = runs;
  if (opts.run === undefined && !dryRun) for (const run of runs) await cancel(opts, run, report);

  if (!dryRun && tasks.length > 0) {
    const reason =
      opts.run === undefined ? "evalfleet teardown (all runs)" : `evalfleet teardown of run ${opts.run}`;
    const ctx = { api: buckets.api, limiter: new Limiter(32), clock, maxApiRetries: 5, log };
    const r = await stopTasks(
      opts.ecs,
      opts.cluster,
      tasks.map((t) => t.arn),
      reason,
      ctx,
    );
    report.stopped = r.stopped;
    report.failed = r.failed;
  }

  for (const run of runs) {
    if (!opts.revokeRunKeys) {
      report.keysNotRevoked.push({ run, reason: "no key revocation configured (set DATABASE_URL)" });
      continue;
    }
    if (dryRun) continue;
    try {
      report.keysRevoked.push({ run, what: await opts.revokeRunKeys(run) });
    } catch (err) {
      report.keysNotRevoked.push({ run, reason: err instanceof Error ? err.message : String(err) });
    }
  }

  for (const cap of opts.evalGroups ?? []) {
    const { desired } = await cap.current();
    const to = dryRun ? 0 : await cap.setDesired(0);
    report.scaled.push({ asg: cap.groupName, from: desired, to });
  }
  return report;
}

async function cancel(opts: TeardownOptions, run: string, report: TeardownReport): Promise<void> {
  if (!opts.cancelRun) {
    report.notCancelled.push({ run, reason: "no NATS connection: a live dispatcher may launch again" });
    return;
  }
  try {
    report.cancelled.push({ run, how: await opts.cancelRun(run) });
  } catch (err) {
    report.notCancelled.push({ run, reason: err instanceof Error ? err.message : String(err) });
  }
}
