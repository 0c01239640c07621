/**
 * The eval tier's Auto Scaling group behind the Query wire API (form-encoded requests, XML answers):
 * DescribeAutoScalingGroups, UpdateAutoScalingGroup, SetDesiredCapacity. A change of desired capacity launches or
 * terminates instances (eval hosts, run by the instance launcher), registers each as an ECS container instance
 * once it is in service — where the eval-worker daemon lands — and drains its tasks before terminating it, as ECS
 * managed draining does.
 */
import { randomBytes } from "node:crypto";
import { ACCOUNT, AwsError, type EcsModel, REGION } from "./ecs.js";

export interface InstanceLauncher {
  /** Bring the host up (its network namespace, its docker); resolves when it can take tasks. */
  boot(instanceId: string): Promise<void>;
  terminate(instanceId: string): Promise<void>;
}

export interface AsgInstance {
  id: string;
  lifecycle: "Pending" | "InService" | "Terminating";
  launchedAt: number;
  containerInstanceArn?: string;
}

export interface AsgGroup {
  name: string;
  arn: string;
  min: number;
  max: number;
  desired: number;
  instances: AsgInstance[];
  launchTemplate: string;
}

export interface AsgCounters {
  describeCalls: number;
  updateCalls: number;
  launched: number;
  terminated: number;
  /** every desired capacity set, in order */
  desiredHistory: number[];
}

export class AsgModel {
  readonly groups = new Map<string, AsgGroup>();
  readonly counters: AsgCounters = {
    describeCalls: 0,
    updateCalls: 0,
    launched: 0,
    terminated: 0,
    desiredHistory: [],
  };
  private work: Promise<void> = Promise.resolve();

  constructor(
    private readonly ecs: EcsModel,
    private readonly hosts: InstanceLauncher,
  ) {}

  addGroup(g: { name: string; min: number; max: number; desired: number; launchTemplate: string }): void {
    const id = randomBytes(16).toString("hex");
    this.groups.set(g.name, {
      ...g,
      arn: `arn:aws:autoscaling:${REGION}:${ACCOUNT}:autoScalingGroup:${id}:autoScalingGroupName/${g.name}`,
      instances: [],
    });
    this.apply(g.name);
  }

  private group(name: string | undefined): AsgGroup {
    const g = name ? this.groups.get(name) : undefined;
    if (!g) throw new AwsError("ValidationError", `AutoScalingGroup name not found - ${name ?? ""}`);
    return g;
  }

  describe(params: Record<string, string>): string {
    this.counters.describeCalls++;
    const names = Object.entries(params)
      .filter(([k]) => /^AutoScalingGroupNames\.member\.\d+$/.test(k))
      .map(([, v]) => v);
    const groups = [...this.groups.values()].filter((g) => names.length === 0 || names.includes(g.name));
    const member = (g: AsgGroup) =>
      `<member><AutoScalingGroupName>${xml(g.name)}</AutoScalingGroupName><AutoScalingGroupARN>${xml(g.arn)}</AutoScalingGroupARN>` +
      `<LaunchTemplate><LaunchTemplateName>${xml(g.launchTemplate)}</LaunchTemplateName><Version>$Default</Version></LaunchTemplate>` +
      `<MinSize>${g.min}</MinSize><MaxSize>${g.max}</MaxSize><DesiredCapacity>${g.desired}</DesiredCapacity>` +
      `<DefaultCooldown>300</DefaultCooldown><AvailabilityZones><member>${REGION}a</member><member>${REGION}b</member></AvailabilityZones>` +
      `<HealthCheckType>EC2</HealthCheckType><CreatedTime>2026-01-01T00:00:00.000Z</CreatedTime>` +
      `<Instances>${g.instances
        .map(
          (i) =>
            `<member><InstanceId>${i.id}</InstanceId><AvailabilityZone>${REGION}a</AvailabilityZone><LifecycleState>${i.lifecycle}</LifecycleState><HealthStatus>Healthy</HealthStatus><ProtectedFromScaleIn>false</ProtectedFromScaleIn></member>`,
        )
        .join("")}</Instances></member>`;
    return `<DescribeAutoScalingGroupsResult><AutoScalingGroups>${groups.map(member).join("")}</AutoScalingGroups></DescribeAutoScalingGroupsResult>`;
  }

  update(params: Record<string, string>): string {
    this.counters.updateCalls++;
    const g = this.group(params.AutoScalingGroupName);
    const min = params.MinSize === undefined ? g.min : Number(params.MinSize);
    const max = params.MaxSize === undefined ? g.max : Number(params.MaxSize);
    const desired =
      params.DesiredCapacity === undefined
        ? Math.min(Math.max(g.desired, min), max)
        : Number(params.DesiredCapacity);
    for (const [k, v] of [
      ["MinSize", min],
      ["MaxSize", max],
      ["DesiredCapacity", desired],
    ] as const)
      if (!Number.isInteger(v) || v < 0)
        throw new AwsError("ValidationError", `${k} must be a non-negative integer`);
    if (min > max)
      throw new AwsError(
        "ValidationError",
        `The specified MinSize ${min} cannot be greater than MaxSize ${max}`,
      );
    if (desired < min || desired > max)
      throw new AwsError(
        "ValidationError",
        `Desired capacity:${desired} must be between the specified min size:${min} and max size:${max}`,
      );
    g.min = min;
    g.max = max;
    this.setDesired(g, desired);
    return "";
  }

  setDesiredCapacity(params: Record<string, string>): string {
    this.counters.updateCalls++;
    const g = this.group(params.AutoScalingGroupName);
    const desired = Number(params.DesiredCapacity);
    if (!Number.isInteger(desired) || desired < g.min || desired > g.max)
      throw new AwsError(
        "ValidationError",
        `New SetDesiredCapacity value ${params.DesiredCapacity} is below min value ${g.min} or above max value ${g.max} for the AutoScalingGroup.`,
      );
    this.setDesired(g, desired);
    return "";
  }

  private setDesired(g: AsgGroup, desired: number): void {
    if (desired !== g.desired) this.counters.desiredHistory.push(desired);
    g.desired = desired;
    this.apply(g.name);
  }

  /** Launch or terminate instances until the group holds `desired` (one change at a time, in order). */
  private apply(name: string): void {
    this.work = this.work.then(() => this.converge(name)).catch(() => {});
  }

  private async converge(name: string): Promise<void> {
    const g = this.groups.get(name);
    if (!g) return;
    const active = () => g.instances.filter((i) => i.lifecycle !== "Terminating");
    while (active().length < g.desired) {
      const inst: AsgInstance = {
        id: `i-${randomBytes(8).toString("hex").slice(0, 17)}`,
        lifecycle: "Pending",
        launchedAt: Date.now(),
      };
      g.instances.push(inst);
      this.counters.launched++;
      await this.hosts.boot(inst.id);
      inst.lifecycle = "InService";
      inst.containerInstanceArn = this.ecs.registerInstance(inst.id).arn;
    }
    while (active().length > g.desired) {
      // The default termination policy, as it plays out in one AZ and one template: the oldest instance first.
      const victim = active().sort((a, b) => a.launchedAt - b.launchedAt)[0]!;
      victim.lifecycle = "Terminating";
      if (victim.containerInstanceArn) await this.ecs.drainInstance(victim.containerInstanceArn);
      await this.hosts.terminate(victim.id);
      g.instances = g.instances.filter((i) => i !== victim);
      this.counters.terminated++;
    }
  }

  /** Resolves once every requested change has been carried out. */
  async settled(): Promise<void> {
    let last: Promise<void> | undefined;
    while (last !== this.work) {
      last = this.work;
      await last;
    }
  }
}

function xml(s: string): string {
  return s.replace(/[<>&"']/g, (c) => `&#${c.charCodeAt(0)};`);
}
