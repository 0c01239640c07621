import { DescribeTasksCommand, ListTasksCommand } from "@aws-sdk/client-ecs";
import { type Logger, silentLogger } from "../../../protocol/log.js";
import { AsgCapacity, type AutoScalingApi } from "../../grader-supervisor/scaler.js";
import { type Clock, systemClock } from "./clock.js";
import { type EcsApi, type EcsBuckets, ecsBuckets, stopTasks } from "./ecs.js";
import { refFromTags, startedByFor } from "./ecs-ids.js";
import { Limiter } from "./limiter.js";

export interface TeardownOptions {
  ecs: EcsApi;
  cluster: string;
  /** Only this run's tasks; all evalfleet harness tasks when omitted. */
  run?: string;
  autoScaling?: AutoScalingApi;
  /** Eval-tier Auto Scaling groups to scale to zero. */
  asgNames?: string[];
  /** Revokes a run's gateway / NATS credentials; wired by the caller. */
  revokeRunKeys?: (run: string) => Promise<void>;
  dryRun?: boolean;
  clock?: Clock;
  buckets?: EcsBuckets;
  log?: Logger;
}

export interface TeardownReport {
  cluster: string;
  run: string | null;
  found: number;
  stopped: string[];
  failed: Array<{ handle: string; error: string }>;
  runs: string[];
  keysRevoked: string[];
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

/** Stop every harness task of a run (or all), revoke the run's keys, and scale the eval tier to zero. */
export async function teardown(opts: TeardownOptions): Promise<TeardownReport> {
  const clock = opts.clock ?? systemClock;
  const buckets = opts.buckets ?? ecsBuckets(clock);
  const log = opts.log ?? silentLogger();
  const dryRun = opts.dryRun ?? false;
  const tasks = await listHarnessTasks(opts.ecs, opts.cluster, opts.run, buckets);
  const runs = opts.run !== undefined ? [opts.run] : [...new Set(tasks.map((t) => t.run))].sort();

  const report: TeardownReport = {
    cluster: opts.cluster,
    run: opts.run ?? null,
    found: tasks.length,
    stopped: [],
    failed: [],
    runs,
    keysRevoked: [],
    keysNotRevoked: [],
    scaled: [],
    dryRun,
  };

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
      await opts.revokeRunKeys(run);
      report.keysRevoked.push(run);
    } catch (err) {
      report.keysNotRevoked.push({ run, reason: err instanceof Error ? err.message : String(err) });
    }
  }

  if (opts.autoScaling) {
    for (const name of opts.asgNames ?? []) {
      const cap = new AsgCapacity(opts.autoScaling, name);
      const { desired } = await cap.current();
      const to = dryRun ? 0 : await cap.setDesired(0);
      report.scaled.push({ asg: name, from: desired, to });
    }
  }
  return report;
}
