/**
 * The ECS control plane the rehearsal needs, as a state machine behind the JSON 1.1 wire API: task definitions
 * (from the synthesised template, or RegisterTaskDefinition), RunTask / DescribeTasks / StopTask / ListTasks with
 * ECS's validation, quotas and lifecycle (PROVISIONING → PENDING → RUNNING → DEACTIVATING → STOPPED, stop codes as
 * ECS writes them), services (replica and daemon) kept at their count by a scheduler, and container instances
 * (the eval hosts the Auto Scaling group brings up). Running containers is the launcher's job (launcher.ts): this
 * file decides, the launcher does.
 */
import { randomBytes } from "node:crypto";
import { ECS_SERVER_QUOTAS, type EcsServerQuotas, QuotaBucket } from "./quota.js";

export const ACCOUNT = "123456789012";
export const REGION = "us-east-1";

export interface ContainerDef {
  name: string;
  image: string;
  command?: string[];
  entryPoint?: string[];
  environment: Record<string, string>;
  /** name → Secrets Manager valueFrom (`arn[:json-key[:stage[:version]]]`) */
  secrets: Record<string, string>;
  user?: string;
  essential: boolean;
  readonlyRootFilesystem: boolean;
  mountPoints: Array<{ containerPath: string; sourceVolume: string; readOnly: boolean }>;
  dependsOn: Array<{ containerName: string; condition: string }>;
  portMappings: number[];
  workingDirectory?: string;
  stopTimeoutS?: number;
}

export interface TaskDef {
  family: string;
  revision: number;
  arn: string;
  networkMode: "awsvpc" | "bridge" | "host";
  compatibilities: string[];
  cpu?: string;
  memory?: string;
  taskRole?: string;
  containers: ContainerDef[];
  volumes: Array<{ name: string; hostPath?: string }>;
}

export type TaskStatus = "PROVISIONING" | "PENDING" | "RUNNING" | "DEACTIVATING" | "STOPPED";

export interface EmuContainer {
  name: string;
  image: string;
  lastStatus: "PENDING" | "RUNNING" | "STOPPED";
  exitCode?: number;
  reason?: string;
}

export interface EmuTask {
  id: string;
  arn: string;
  cluster: string;
  def: TaskDef;
  lastStatus: TaskStatus;
  desiredStatus: "RUNNING" | "STOPPED";
  createdAt: number;
  startedAt?: number;
  stoppingAt?: number;
  stoppedAt?: number;
  stopCode?: string;
  stoppedReason?: string;
  tags: Array<{ key: string; value: string }>;
  startedBy?: string;
  group: string;
  launchType: "FARGATE" | "EC2";
  /** container name → overrides given at RunTask */
  overrides: Record<string, { environment: Record<string, string>; command?: string[] }>;
  containers: EmuContainer[];
  /** The container instance (eval host) an EC2 task runs on. */
  containerInstance?: string;
  /** Injected: the image to pull instead of the definition's (a digest no registry has). */
  imageOverride?: string;
}

/** How a launcher reports what happened to a task's containers. */
export interface LaunchHooks {
  running(): void;
  exited(container: string, exitCode: number | null, reason?: string): void;
  failed(reason: string): void;
}

export interface TaskLauncher {
  launch(task: EmuTask, hooks: LaunchHooks): void;
  /** Stop what still runs (SIGTERM, SIGKILL after graceMs); resolves when every container is gone. */
  stop(task: EmuTask, graceMs: number): Promise<void>;
}

export class AwsError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly status = 400,
  ) {
    super(message);
  }
}

export type InjectedFailure = "capacity" | "missing-image" | "access-denied";

interface Service {
  name: string;
  arn: string;
  def: TaskDef;
  desiredCount: number;
  daemon: boolean;
  launchType: "FARGATE" | "EC2";
  /** restarts back off so a crashing service does not spin */
  nextStartAt: number;
  failures: number;
}

export interface ContainerInstance {
  id: string;
  arn: string;
  ec2InstanceId: string;
  status: "ACTIVE" | "DRAINING";
}

export interface EcsCounters {
  runTaskCalls: number;
  tasksStarted: number;
  throttled: number;
  capacityFailures: number;
  missingImage: number;
  accessDenied: number;
  stopTaskCalls: number;
  describeCalls: number;
  listCalls: number;
}

const hex = (n: number) => randomBytes(n).toString("hex");
const epoch = (ms: number | undefined) => (ms === undefined ? undefined : ms / 1000);

export class EcsModel {
  readonly clusterName: string;
  readonly clusterArn: string;
  private readonly defs = new Map<string, TaskDef>();
  readonly tasks = new Map<string, EmuTask>();
  private readonly tokens = new Map<string, string[]>();
  private readonly services = new Map<string, Service>();
  readonly instances = new Map<string, ContainerInstance>();
  private readonly injected: Array<{ kind: InjectedFailure; remaining: number }> = [];
  private readonly launch: QuotaBucket;
  private readonly api: QuotaBucket;
  private readonly describe: QuotaBucket;
  readonly counters: EcsCounters = {
    runTaskCalls: 0,
    tasksStarted: 0,
    throttled: 0,
    capacityFailures: 0,
    missingImage: 0,
    accessDenied: 0,
    stopTaskCalls: 0,
    describeCalls: 0,
    listCalls: 0,
  };
  private scheduler: NodeJS.Timeout | undefined;

  constructor(
    private readonly launcher: TaskLauncher,
    opts: { cluster: string; quotas?: Partial<EcsServerQuotas>; now?: () => number },
    readonly quotas: EcsServerQuotas = { ...ECS_SERVER_QUOTAS, ...opts.quotas },
  ) {
    this.clusterName = opts.cluster;
    this.clusterArn = `arn:aws:ecs:${REGION}:${ACCOUNT}:cluster/${opts.cluster}`;
    const now = opts.now ?? Date.now;
    this.launch = new QuotaBucket(this.quotas.launchBurst, this.quotas.launchPerSec, now);
    this.api = new QuotaBucket(this.quotas.apiBurst, this.quotas.apiPerSec, now);
    this.describe = new QuotaBucket(this.quotas.describeBurst, this.quotas.describePerSec, now);
  }

  // ---- definitions, services, instances (the stack's side) ----

  register(def: Omit<TaskDef, "revision" | "arn">): TaskDef {
    const revision = [...this.defs.values()].filter((d) => d.family === def.family).length + 1;
    const full: TaskDef = {
      ...def,
      revision,
      arn: `arn:aws:ecs:${REGION}:${ACCOUNT}:task-definition/${def.family}:${revision}`,
    };
    this.defs.set(`${def.family}:${revision}`, full);
    return full;
  }

  definition(ref: string): TaskDef | undefined {
    const name = ref.startsWith("arn:") ? ref.slice(ref.indexOf("task-definition/") + 16) : ref;
    if (name.includes(":")) return this.defs.get(name);
    const all = [...this.defs.values()].filter((d) => d.family === name);
    return all.sort((a, b) => b.revision - a.revision)[0];
  }

  addService(s: {
    name: string;
    def: TaskDef;
    desiredCount: number;
    daemon: boolean;
    launchType: "FARGATE" | "EC2";
  }) {
    this.services.set(s.name, {
      ...s,
      arn: `arn:aws:ecs:${REGION}:${ACCOUNT}:service/${this.clusterName}/${s.name}`,
      nextStartAt: 0,
      failures: 0,
    });
  }

  setServiceCount(name: string, desiredCount: number): void {
    const s = this.services.get(name);
    if (!s) throw new AwsError("ServiceNotFoundException", `Service not found: ${name}`);
    s.desiredCount = desiredCount;
  }

  registerInstance(ec2InstanceId: string): ContainerInstance {
    const id = hex(16);
    const ci: ContainerInstance = {
      id,
      arn: `arn:aws:ecs:${REGION}:${ACCOUNT}:container-instance/${this.clusterName}/${id}`,
      ec2InstanceId,
      status: "ACTIVE",
    };
    this.instances.set(ci.arn, ci);
    return ci;
  }

  /** ECS managed draining: the instance's tasks are stopped before it may go. Resolves when they are. */
  async drainInstance(arn: string): Promise<void> {
    const ci = this.instances.get(arn);
    if (!ci) return;
    ci.status = "DRAINING";
    const on = [...this.tasks.values()].filter(
      (t) => t.containerInstance === arn && t.lastStatus !== "STOPPED",
    );
    await Promise.all(
      on.map((t) => this.stopTaskNow(t, "ServiceSchedulerInitiated", "Container instance is being drained")),
    );
    this.instances.delete(arn);
  }

  /** The service scheduler: keep each service at its count (daemons: one task per active instance). */
  startScheduler(intervalMs = 1000): void {
    this.scheduler ??= setInterval(() => this.reconcile(), intervalMs);
    this.reconcile();
  }

  stopScheduler(): void {
    clearInterval(this.scheduler);
    this.scheduler = undefined;
  }

  private reconcile(): void {
    const now = Date.now();
    for (const s of this.services.values()) {
      const live = [...this.tasks.values()].filter(
        (t) => t.group === `service:${s.name}` && t.desiredStatus === "RUNNING",
      );
      if (s.daemon) {
        for (const ci of this.instances.values()) {
          if (ci.status !== "ACTIVE" || live.some((t) => t.containerInstance === ci.arn)) continue;
          if (now < s.nextStartAt) continue;
          this.createTask(s.def, {
            group: `service:${s.name}`,
            startedBy: "ecs-svc",
            launchType: s.launchType,
            containerInstance: ci.arn,
          });
        }
        continue;
      }
      for (let i = live.length; i < s.desiredCount && now >= s.nextStartAt; i++)
        this.createTask(s.def, {
          group: `service:${s.name}`,
          startedBy: "ecs-svc",
          launchType: s.launchType,
        });
      for (const extra of live.slice(s.desiredCount))
        void this.stopTaskNow(extra, "ServiceSchedulerInitiated", "Scaling activity initiated by deployment");
    }
  }

  inject(kind: InjectedFailure, count = 1): void {
    this.injected.push({ kind, remaining: count });
  }

  private takeInjected(kinds: InjectedFailure[]): InjectedFailure | undefined {
    const i = this.injected.findIndex((f) => kinds.includes(f.kind) && f.remaining > 0);
    if (i < 0) return undefined;
    const f = this.injected[i]!;
    if (--f.remaining === 0) this.injected.splice(i, 1);
    return f.kind;
  }

  // ---- the API ----

  private checkCluster(cluster: unknown): void {
    const c = typeof cluster === "string" && cluster !== "" ? cluster : "default";
    if (c !== this.clusterName && c !== this.clusterArn)
      throw new AwsError("ClusterNotFoundException", "Cluster not found.");
  }

  runTask(input: Record<string, unknown>): unknown {
    this.counters.runTaskCalls++;
    this.checkCluster(input.cluster);
    if (this.takeInjected(["access-denied"])) {
      this.counters.accessDenied++;
      throw new AwsError(
        "AccessDeniedException",
        `User: arn:aws:sts::${ACCOUNT}:assumed-role/evalfleet-dispatcher/task is not authorized to perform: ecs:RunTask on resource: ${String(input.taskDefinition)} because no identity-based policy allows the ecs:RunTask action`,
      );
    }
    const count = input.count === undefined ? 1 : Number(input.count);
    if (!Number.isInteger(count) || count < 1 || count > this.quotas.maxPerRunTask)
      throw new AwsError(
        "InvalidParameterException",
        `The count parameter must be between 1 and ${this.quotas.maxPerRunTask}, got ${String(input.count)}.`,
      );
    const overrides = (input.overrides ?? {}) as {
      containerOverrides?: Array<{
        name?: string;
        environment?: Array<{ name: string; value: string }>;
        command?: string[];
      }>;
    };
    if (Buffer.byteLength(JSON.stringify(overrides)) > this.quotas.maxOverridesBytes)
      throw new AwsError(
        "InvalidParameterException",
        `Container Overrides length must be at most ${this.quotas.maxOverridesBytes}`,
      );
    const def = this.definition(String(input.taskDefinition ?? ""));
    if (!def) throw new AwsError("ClientException", "TaskDefinition not found.");
    const launchType = input.launchType === "EC2" ? "EC2" : "FARGATE";
    if (launchType === "FARGATE") {
      if (!def.compatibilities.includes("FARGATE"))
        throw new AwsError(
          "InvalidParameterException",
          "Task definition does not support launch_type FARGATE.",
        );
      const vpc = (input.networkConfiguration as { awsvpcConfiguration?: { subnets?: string[] } } | undefined)
        ?.awsvpcConfiguration;
      if (!vpc?.subnets?.length)
        throw new AwsError(
          "InvalidParameterException",
          "Network Configuration must be provided when networkMode 'awsvpc' is specified.",
        );
    }
    const byName: EmuTask["overrides"] = {};
    for (const o of overrides.containerOverrides ?? []) {
      if (!o.name || !def.containers.some((c) => c.name === o.name))
        throw new AwsError(
          "InvalidParameterException",
          `Override for container named ${o.name} is not a container in the TaskDefinition.`,
        );
      byName[o.name] = {
        environment: Object.fromEntries((o.environment ?? []).map((e) => [e.name, e.value])),
        ...(o.command ? { command: o.command } : {}),
      };
    }
    const token = typeof input.clientToken === "string" ? input.clientToken : undefined;
    const earlier = token ? this.tokens.get(token) : undefined;
    if (earlier) return { tasks: earlier.map((arn) => this.wire(this.tasks.get(arn)!, true)), failures: [] };

    if (!this.api.tryTake(1) || !this.launch.tryTake(count)) {
      this.counters.throttled++;
      throw new AwsError("ThrottlingException", "Rate exceeded");
    }
    if (this.takeInjected(["capacity"])) {
      this.counters.capacityFailures++;
      return {
        tasks: [],
        failures: Array.from({ length: count }, () => ({
          arn: def.arn,
          reason:
            "Capacity is unavailable at this time. Please try again later or in a different availability zone",
        })),
      };
    }
    const tags = ((input.tags ?? []) as Array<{ key: string; value: string }>).map((t) => ({
      key: t.key,
      value: t.value,
    }));
    const created: EmuTask[] = [];
    for (let i = 0; i < count; i++) {
      const missing = this.takeInjected(["missing-image"]);
      if (missing) this.counters.missingImage++;
      created.push(
        this.createTask(def, {
          group: typeof input.group === "string" ? input.group : `family:${def.family}`,
          launchType,
          overrides: byName,
          tags,
          ...(typeof input.startedBy === "string" ? { startedBy: input.startedBy } : {}),
          ...(missing
            ? { imageOverride: `${def.containers[0]!.image.split("@")[0]}@sha256:${"d".repeat(64)}` }
            : {}),
        }),
      );
    }
    if (token)
      this.tokens.set(
        token,
        created.map((t) => t.arn),
      );
    return { tasks: created.map((t) => this.wire(t, true)), failures: [] };
  }

  private createTask(
    def: TaskDef,
    o: {
      group: string;
      launchType: "FARGATE" | "EC2";
      startedBy?: string;
      overrides?: EmuTask["overrides"];
      tags?: EmuTask["tags"];
      containerInstance?: string;
      imageOverride?: string;
    },
  ): EmuTask {
    const id = hex(16);
    const task: EmuTask = {
      id,
      arn: `arn:aws:ecs:${REGION}:${ACCOUNT}:task/${this.clusterName}/${id}`,
      cluster: this.clusterName,
      def,
      lastStatus: "PROVISIONING",
      desiredStatus: "RUNNING",
      createdAt: Date.now(),
      tags: o.tags ?? [],
      group: o.group,
      launchType: o.launchType,
      overrides: o.overrides ?? {},
      containers: def.containers.map((c) => ({ name: c.name, image: c.image, lastStatus: "PENDING" })),
      ...(o.startedBy ? { startedBy: o.startedBy } : {}),
      ...(o.containerInstance ? { containerInstance: o.containerInstance } : {}),
      ...(o.imageOverride ? { imageOverride: o.imageOverride } : {}),
    };
    this.tasks.set(task.arn, task);
    this.counters.tasksStarted++;
    task.lastStatus = "PENDING";
    this.launcher.launch(task, {
      running: () => {
        if (task.lastStatus !== "PENDING") return;
        task.lastStatus = "RUNNING";
        task.startedAt = Date.now();
        for (const c of task.containers) if (c.lastStatus === "PENDING") c.lastStatus = "RUNNING";
        const s = this.serviceOf(task);
        if (s) s.failures = 0;
      },
      exited: (name, exitCode, reason) => this.containerExited(task, name, exitCode, reason),
      failed: (reason) => {
        for (const c of task.containers) {
          c.lastStatus = "STOPPED";
          c.reason = reason;
        }
        this.finish(task, "TaskFailedToStart", reason);
      },
    });
    return task;
  }

  private serviceOf(task: EmuTask): Service | undefined {
    return task.group.startsWith("service:") ? this.services.get(task.group.slice(8)) : undefined;
  }

  private containerExited(task: EmuTask, name: string, exitCode: number | null, reason?: string): void {
    const c = task.containers.find((x) => x.name === name);
    if (!c || c.lastStatus === "STOPPED") return;
    c.lastStatus = "STOPPED";
    if (exitCode !== null) c.exitCode = exitCode;
    if (reason) c.reason = reason;
    const def = task.def.containers.find((x) => x.name === name);
    const allDone = task.containers.every((x) => x.lastStatus === "STOPPED");
    if (task.lastStatus === "DEACTIVATING") {
      if (allDone) this.finish(task);
      return;
    }
    if (def?.essential || allDone) {
      task.stopCode = "EssentialContainerExited";
      task.stoppedReason = `Essential container in task exited`;
      void this.deactivate(task, def?.stopTimeoutS);
    }
  }

  private async deactivate(task: EmuTask, stopTimeoutS = 30): Promise<void> {
    if (task.lastStatus === "DEACTIVATING" || task.lastStatus === "STOPPED") return;
    task.desiredStatus = "STOPPED";
    task.stoppingAt = Date.now();
    task.lastStatus = "DEACTIVATING";
    try {
      await this.launcher.stop(task, stopTimeoutS * 1000);
    } finally {
      for (const c of task.containers) if (c.lastStatus !== "STOPPED") c.lastStatus = "STOPPED";
      this.finish(task);
    }
  }

  private finish(task: EmuTask, stopCode?: string, reason?: string): void {
    if (task.lastStatus === "STOPPED") return;
    if (stopCode && !task.stopCode) task.stopCode = stopCode;
    if (reason && !task.stoppedReason) task.stoppedReason = reason;
    task.lastStatus = "STOPPED";
    task.desiredStatus = "STOPPED";
    task.stoppedAt = Date.now();
    const s = this.serviceOf(task);
    if (s) {
      // The scheduler replaces a stopped task; one that never ran waits longer each time.
      s.failures = task.startedAt === undefined ? s.failures + 1 : 0;
      s.nextStartAt = Date.now() + Math.min(60_000, 1000 * 2 ** Math.min(6, s.failures));
    }
  }

  private async stopTaskNow(task: EmuTask, stopCode: string, reason: string): Promise<void> {
    if (task.lastStatus === "STOPPED") return;
    if (!task.stopCode) task.stopCode = stopCode;
    if (!task.stoppedReason) task.stoppedReason = reason;
    const stopTimeoutS = Math.max(...task.def.containers.map((c) => c.stopTimeoutS ?? 30));
    await this.deactivate(task, stopTimeoutS);
  }

  stopTask(input: Record<string, unknown>): unknown {
    this.counters.stopTaskCalls++;
    this.checkCluster(input.cluster);
    if (!this.api.tryTake(1)) {
      this.counters.throttled++;
      throw new AwsError("ThrottlingException", "Rate exceeded");
    }
    const task = this.findTask(String(input.task ?? ""));
    if (!task) throw new AwsError("InvalidParameterException", "The referenced task was not found.");
    const reason = typeof input.reason === "string" ? input.reason.slice(0, 255) : "Task stopped by user";
    void this.stopTaskNow(task, "UserInitiated", reason);
    return { task: this.wire(task, true) };
  }

  private findTask(ref: string): EmuTask | undefined {
    if (ref.startsWith("arn:")) return this.tasks.get(ref);
    return [...this.tasks.values()].find((t) => t.id === ref);
  }

  describeTasks(input: Record<string, unknown>): unknown {
    this.counters.describeCalls++;
    this.checkCluster(input.cluster);
    const refs = (input.tasks ?? []) as string[];
    if (refs.length === 0) throw new AwsError("InvalidParameterException", "Tasks cannot be empty.");
    if (refs.length > this.quotas.maxPerDescribe)
      throw new AwsError(
        "InvalidParameterException",
        `Tasks can have at most ${this.quotas.maxPerDescribe} items.`,
      );
    if (!this.describe.tryTake(1)) {
      this.counters.throttled++;
      throw new AwsError("ThrottlingException", "Rate exceeded");
    }
    const withTags = ((input.include ?? []) as string[]).includes("TAGS");
    const tasks: unknown[] = [];
    const failures: unknown[] = [];
    for (const ref of refs) {
      const t = this.findTask(ref);
      if (t) tasks.push(this.wire(t, withTags));
      else failures.push({ arn: ref, reason: "MISSING" });
    }
    return { tasks, failures };
  }

  listTasks(input: Record<string, unknown>): unknown {
    this.counters.listCalls++;
    this.checkCluster(input.cluster);
    if (!this.describe.tryTake(1)) {
      this.counters.throttled++;
      throw new AwsError("ThrottlingException", "Rate exceeded");
    }
    const desired = input.desiredStatus === "STOPPED" ? "STOPPED" : "RUNNING";
    const max = Math.min(100, Number(input.maxResults ?? 100));
    const start = typeof input.nextToken === "string" ? Number(input.nextToken) : 0;
    const all = [...this.tasks.values()].filter(
      (t) =>
        t.desiredStatus === desired &&
        (input.startedBy === undefined || t.startedBy === input.startedBy) &&
        (input.family === undefined || t.def.family === input.family) &&
        (input.serviceName === undefined || t.group === `service:${String(input.serviceName)}`) &&
        (input.containerInstance === undefined || t.containerInstance === input.containerInstance),
    );
    const page = all.slice(start, start + max);
    return {
      taskArns: page.map((t) => t.arn),
      ...(start + max < all.length ? { nextToken: String(start + max) } : {}),
    };
  }

  registerTaskDefinition(input: Record<string, unknown>): unknown {
    const containers = ((input.containerDefinitions ?? []) as Array<Record<string, unknown>>).map(
      (c): ContainerDef => ({
        name: String(c.name),
        image: String(c.image),
        ...(Array.isArray(c.command) ? { command: c.command as string[] } : {}),
        environment: Object.fromEntries(
          ((c.environment ?? []) as Array<{ name: string; value: string }>).map((e) => [e.name, e.value]),
        ),
        secrets: Object.fromEntries(
          ((c.secrets ?? []) as Array<{ name: string; valueFrom: string }>).map((e) => [e.name, e.valueFrom]),
        ),
        essential: c.essential !== false,
        readonlyRootFilesystem: c.readonlyRootFilesystem === true,
        mountPoints: [],
        dependsOn: [],
        portMappings: [],
        ...(typeof c.user === "string" ? { user: c.user } : {}),
      }),
    );
    if (containers.length === 0) throw new AwsError("ClientException", "Container list cannot be empty.");
    const def = this.register({
      family: String(input.family),
      networkMode: (input.networkMode as TaskDef["networkMode"]) ?? "awsvpc",
      compatibilities: (input.requiresCompatibilities as string[]) ?? ["FARGATE"],
      containers,
      volumes: [],
    });
    return {
      taskDefinition: {
        taskDefinitionArn: def.arn,
        family: def.family,
        revision: def.revision,
        status: "ACTIVE",
      },
    };
  }

  /** A task as DescribeTasks answers (dates as epoch seconds, as the JSON protocol sends them). */
  wire(t: EmuTask, withTags: boolean): Record<string, unknown> {
    return {
      taskArn: t.arn,
      clusterArn: this.clusterArn,
      taskDefinitionArn: t.def.arn,
      lastStatus: t.lastStatus,
      desiredStatus: t.desiredStatus,
      launchType: t.launchType,
      group: t.group,
      ...(t.startedBy ? { startedBy: t.startedBy } : {}),
      ...(t.containerInstance ? { containerInstanceArn: t.containerInstance } : {}),
      createdAt: epoch(t.createdAt),
      ...(t.startedAt ? { startedAt: epoch(t.startedAt) } : {}),
      ...(t.stoppingAt ? { stoppingAt: epoch(t.stoppingAt) } : {}),
      ...(t.stoppedAt ? { stoppedAt: epoch(t.stoppedAt) } : {}),
      ...(t.stopCode ? { stopCode: t.stopCode } : {}),
      ...(t.stoppedReason ? { stoppedReason: t.stoppedReason } : {}),
      containers: t.containers.map((c) => ({
        containerArn: `arn:aws:ecs:${REGION}:${ACCOUNT}:container/${this.clusterName}/${t.id}/${c.name}`,
        taskArn: t.arn,
        name: c.name,
        image: t.imageOverride ?? c.image,
        lastStatus: c.lastStatus,
        ...(c.exitCode === undefined ? {} : { exitCode: c.exitCode }),
        ...(c.reason ? { reason: c.reason } : {}),
      })),
      ...(withTags ? { tags: t.tags } : {}),
      overrides: {
        containerOverrides: Object.entries(t.overrides).map(([name, o]) => ({
          name,
          environment: Object.entries(o.environment).map(([k, v]) => ({ name: k, value: v })),
        })),
      },
    };
  }

  /** Tasks that are not STOPPED (for the rehearsal's "nothing left running" check). */
  live(filter: (t: EmuTask) => boolean = () => true): EmuTask[] {
    return [...this.tasks.values()].filter((t) => t.lastStatus !== "STOPPED" && filter(t));
  }
}
