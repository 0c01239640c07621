import {
  DescribeTasksCommand,
  type DescribeTasksCommandOutput,
  type ListTasksCommand,
  type ListTasksCommandOutput,
  RunTaskCommand,
  type RunTaskCommandInput,
  type RunTaskCommandOutput,
  StopTaskCommand,
  type StopTaskCommandOutput,
} from "@aws-sdk/client-ecs";
import { NATS_USER_ENV } from "../../../config/index.js";
import { type Logger, silentLogger } from "../../../lib/log.js";
import { type RetryOptions, retry } from "../../../lib/retry.js";
import { ErrorCode, EvalfleetError } from "../../../protocol/errors.js";
import { JobRefEnv } from "../../../protocol/task.js";
import { type Clock, systemClock } from "./clock.js";
import {
  classifyRunError,
  classifyRunFailure,
  classifyStoppedTask,
  isRetryableApiError,
  phaseOf,
} from "./ecs-classify.js";
import { clientTokenFor, refFromTags, refKey, startedByFor, tagsFor } from "./ecs-ids.js";
import { Limiter } from "./limiter.js";
import { DEFAULT_ECS_QUOTAS, type EcsQuotas, TokenBucket } from "./token-bucket.js";
import type { JobRef, LaunchBackend, LaunchRef, StopClass, TaskNatsCredential, TaskState } from "./types.js";

/** The ECS calls this module makes. `ECSClient` satisfies it; tests pass a fake. */
export interface EcsApi {
  send(command: RunTaskCommand): Promise<RunTaskCommandOutput>;
  send(command: StopTaskCommand): Promise<StopTaskCommandOutput>;
  send(command: DescribeTasksCommand): Promise<DescribeTasksCommandOutput>;
  send(command: ListTasksCommand): Promise<ListTasksCommandOutput>;
}

/** The three buckets one account's ECS quotas come down to. Share one set per process (backend + teardown). */
export interface EcsBuckets {
  launch: TokenBucket;
  api: TokenBucket;
  describe: TokenBucket;
}

export function ecsBuckets(clock: Clock, q: EcsQuotas = DEFAULT_ECS_QUOTAS): EcsBuckets {
  return {
    launch: new TokenBucket(q.launchBurst, q.launchPerSec, clock),
    api: new TokenBucket(q.apiBurst, q.apiPerSec, clock),
    describe: new TokenBucket(q.describeBurst, q.describePerSec, clock),
  };
}

export interface EcsBackendOptions {
  ecs: EcsApi;
  cluster: string;
  /** A task definition (family:revision or ARN, pinned to an image digest), or one per ref (per instance image). */
  taskDefinition: string | ((ref: JobRef) => string);
  /** The harness container's name: it receives the job reference and its exit code is the attempt's. */
  containerName: string;
  subnets: string[];
  securityGroups: string[];
  /** FARGATE_SPOT trades interruptions (retryable, never the model's fault) for price. */
  capacityProvider?: "FARGATE" | "FARGATE_SPOT";
  clock?: Clock;
  buckets?: EcsBuckets;
  quotas?: Partial<EcsQuotas>;
  maxInFlight?: number;
  /** Retries of one API call on throttling / 5xx, with the same clientToken. */
  maxApiRetries?: number;
  log?: Logger;
}

const DESCRIBE_BATCH = 100;

/**
 * Launches harness tasks on ECS Fargate within the account's quotas.
 *
 * One task per RunTask call: RunTask's overrides block is shared by every task a call starts, so a call of ten
 * could hand all ten only the same reference. One call per task gives each its own (run, cell, attempt) in env
 * overrides and a clientToken of its own; it costs one API token per launch, and since the API bucket (40/s)
 * refills twice as fast as the Fargate launch bucket (20/s), launches stay bound by Fargate and StopTask keeps
 * half the API bucket.
 */
export class EcsBackend implements LaunchBackend {
  readonly name = "ecs";
  readonly tasksConnect = true;
  readonly buckets: EcsBuckets;
  private readonly clock: Clock;
  private readonly limiter: Limiter;
  private readonly log: Logger;
  private readonly maxApiRetries: number;
  /** handle → ref, for tasks this process launched (tags cover the rest). */
  private readonly refs = new Map<string, JobRef>();
  /** attempt → launch generation; `settled` once that generation's task is known to have stopped or failed. */
  private readonly gens = new Map<string, { gen: number; settled: boolean }>();
  private closed = false;

  constructor(private readonly opts: EcsBackendOptions) {
    this.clock = opts.clock ?? systemClock;
    this.buckets = opts.buckets ?? ecsBuckets(this.clock, { ...DEFAULT_ECS_QUOTAS, ...opts.quotas });
    this.limiter = new Limiter(opts.maxInFlight ?? 32);
    this.log = opts.log ?? silentLogger();
    this.maxApiRetries = opts.maxApiRetries ?? 5;
  }

  async launch(
    refs: LaunchRef[],
    signal?: AbortSignal,
  ): Promise<Array<{ ref: JobRef; handle?: string; error?: StopClass }>> {
    if (this.closed) throw new Error("ecs backend is closed");
    const results: Array<Promise<{ ref: JobRef; handle?: string; error?: StopClass }>> = [];
    for (const { natsCredential, ...ref } of refs) {
      if (signal?.aborted) {
        results.push(Promise.resolve({ ref, error: aborted() }));
        continue;
      }
      try {
        await this.limiter.acquire();
        // Tokens are taken here, in order, so pacing never depends on how fast responses come back.
        await this.buckets.launch.take(1, signal);
        await this.buckets.api.take(1, signal);
      } catch {
        this.limiter.release();
        results.push(Promise.resolve({ ref, error: aborted() }));
        continue;
      }
      results.push(this.runOne(ref, signal, natsCredential).finally(() => this.limiter.release()));
    }
    return Promise.all(results);
  }

  private generation(ref: JobRef): number {
    const key = refKey(ref);
    const cur = this.gens.get(key);
    // An attempt whose task is still unsettled reuses its token, so a repeated launch returns the same task.
    const next = cur === undefined ? 0 : cur.settled ? cur.gen + 1 : cur.gen;
    this.gens.set(key, { gen: next, settled: false });
    return next;
  }

  private settle(ref: JobRef): void {
    const g = this.gens.get(refKey(ref));
    if (g) g.settled = true;
  }

  private async runOne(
    ref: JobRef,
    signal?: AbortSignal,
    nats?: TaskNatsCredential,
  ): Promise<{ ref: JobRef; handle?: string; error?: StopClass }> {
    const input = this.runTaskInput(ref, clientTokenFor(ref, this.generation(ref)), nats);
    try {
      const out = await retry(async (attempt) => {
        if (attempt > 0) await this.buckets.api.take(1, signal);
        return await this.opts.ecs.send(new RunTaskCommand(input));
      }, this.apiRetry(signal));
      const arn = out.tasks?.[0]?.taskArn;
      if (arn) {
        this.refs.set(arn, ref);
        return { ref, handle: arn };
      }
      const failure = out.failures?.[0];
      const error = failure
        ? classifyRunFailure(failure)
        : ({ kind: "retryable", reason: "RunTask returned no task", neverStarted: true } as const);
      this.log.warn({ ref, error }, "RunTask started no task");
      this.settle(ref);
      return { ref, error };
    } catch (err) {
      this.settle(ref);
      if (signal?.aborted) return { ref, error: aborted() };
      const error = classifyRunError(err);
      this.log.warn({ ref, error }, "RunTask failed");
      return { ref, error };
    }
  }

  /** Throttling and 5xx from the ECS API are tried again (same clientToken), on the backend's clock. */
  private apiRetry(signal?: AbortSignal): RetryOptions<unknown> {
    return apiRetryOptions({ clock: this.clock, maxApiRetries: this.maxApiRetries }, signal);
  }

  private runTaskInput(ref: JobRef, clientToken: string, nats?: TaskNatsCredential): RunTaskCommandInput {
    const o = this.opts;
    return {
      cluster: o.cluster,
      taskDefinition: typeof o.taskDefinition === "string" ? o.taskDefinition : o.taskDefinition(ref),
      count: 1,
      clientToken,
      startedBy: startedByFor(ref.runName),
      ...(o.capacityProvider
        ? { capacityProviderStrategy: [{ capacityProvider: o.capacityProvider, weight: 1 }] }
        : { launchType: "FARGATE" }),
      networkConfiguration: {
        awsvpcConfiguration: {
          subnets: o.subnets,
          securityGroups: o.securityGroups,
          assignPublicIp: "DISABLED",
        },
      },
      overrides: {
        containerOverrides: [
          {
            name: o.containerName,
            // The reference, and the attempt's own NATS user (expiring with it) in this container's override only:
            // the task container. The harness container of the same task never gets it (docs/security.md §5).
            environment: [
              { name: JobRefEnv.run, value: ref.runName },
              { name: JobRefEnv.cell, value: ref.cellId },
              { name: JobRefEnv.attempt, value: String(ref.attempt) },
              { name: JobRefEnv.pool, value: ref.pool },
              ...(nats
                ? [
                    { name: NATS_USER_ENV.jwt, value: nats.jwt },
                    { name: NATS_USER_ENV.seed, value: nats.seed },
                  ]
                : []),
            ],
          },
        ],
      },
      tags: tagsFor(ref),
      enableECSManagedTags: true,
      propagateTags: "TASK_DEFINITION",
    };
  }

  async observe(handles: string[]): Promise<TaskState[]> {
    const out: TaskState[] = [];
    for (let i = 0; i < handles.length; i += DESCRIBE_BATCH) {
      const batch = handles.slice(i, i + DESCRIBE_BATCH);
      const res = await this.describe(batch);
      for (const task of res.tasks ?? []) {
        const arn = task.taskArn;
        if (!arn) continue;
        const ref = this.refs.get(arn) ?? refFromTags(task.tags);
        if (!ref) continue;
        this.refs.set(arn, ref);
        const phase = phaseOf(task.lastStatus);
        if (phase !== "stopped") {
          out.push({ ref, handle: arn, phase });
          continue;
        }
        this.settle(ref);
        out.push({ ref, handle: arn, phase, stop: classifyStoppedTask(task, this.opts.containerName) });
      }
      for (const f of res.failures ?? []) {
        const ref = f.arn ? this.refs.get(f.arn) : undefined;
        if (!f.arn || !ref) continue;
        // ECS forgets stopped tasks after a while. The dispatcher checks for a landed result before relaunching.
        this.settle(ref);
        out.push({
          ref,
          handle: f.arn,
          phase: "stopped",
          stop: {
            kind: "retryable",
            reason: `task record gone: ${f.reason ?? "MISSING"}`,
            neverStarted: false,
          },
        });
      }
    }
    return out;
  }

  private async describe(tasks: string[]): Promise<DescribeTasksCommandOutput> {
    return await retry(async () => {
      await this.buckets.describe.take(1);
      return await this.opts.ecs.send(
        new DescribeTasksCommand({ cluster: this.opts.cluster, tasks, include: ["TAGS"] }),
      );
    }, this.apiRetry());
  }

  async stop(handles: string[], reason: string): Promise<void> {
    const { failed } = await stopTasks(this.opts.ecs, this.opts.cluster, handles, reason, {
      api: this.buckets.api,
      limiter: this.limiter,
      clock: this.clock,
      maxApiRetries: this.maxApiRetries,
      log: this.log,
    });
    if (failed.length > 0) {
      throw new EvalfleetError(
        ErrorCode.Unavailable,
        `could not stop ${failed.length} task(s): ${failed[0]?.error}`,
        {
          retryable: true,
        },
      );
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.limiter.idle();
  }
}

function aborted(): StopClass {
  return { kind: "retryable", reason: "launch aborted", neverStarted: true };
}

/** An ECS API call's retries: throttling and 5xx only, 0.5 s doubling to 10 s, jittered, on the given clock. */
export function apiRetryOptions(
  ctx: { clock: Clock; maxApiRetries: number },
  signal?: AbortSignal,
): RetryOptions<unknown> {
  return {
    tries: ctx.maxApiRetries + 1,
    baseMs: 500,
    maxMs: 10_000,
    retryError: isRetryableApiError,
    sleep: (ms, s) => ctx.clock.sleep(ms, s),
    ...(signal ? { signal } : {}),
  };
}

/** Stop tasks through the shared API bucket. A task that is already gone counts as stopped. */
export async function stopTasks(
  ecs: EcsApi,
  cluster: string,
  handles: string[],
  reason: string,
  ctx: { api: TokenBucket; limiter: Limiter; clock: Clock; maxApiRetries: number; log: Logger },
): Promise<{ stopped: string[]; failed: Array<{ handle: string; error: string }> }> {
  const stopped: string[] = [];
  const failed: Array<{ handle: string; error: string }> = [];
  const pending: Array<Promise<void>> = [];
  for (const handle of handles) {
    await ctx.limiter.acquire();
    await ctx.api.take(1);
    pending.push(
      (async () => {
        try {
          await retry(async (attempt) => {
            if (attempt > 0) await ctx.api.take(1);
            await ecs.send(new StopTaskCommand({ cluster, task: handle, reason: reason.slice(0, 255) }));
          }, apiRetryOptions(ctx));
          stopped.push(handle);
        } catch (err) {
          const name = err instanceof Error ? err.name : "";
          const msg = err instanceof Error ? err.message : String(err);
          if (name === "InvalidParameterException" && /not found|STOPPED/i.test(msg)) {
            stopped.push(handle);
            return;
          }
          ctx.log.warn({ handle, err: msg }, "StopTask failed");
          failed.push({ handle, error: `${name}: ${msg}` });
        }
      })().finally(() => ctx.limiter.release()),
    );
  }
  await Promise.all(pending);
  return { stopped, failed };
}
