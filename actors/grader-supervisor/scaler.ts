import {
  DescribeAutoScalingGroupsCommand,
  type DescribeAutoScalingGroupsCommandOutput,
  UpdateAutoScalingGroupCommand,
  type UpdateAutoScalingGroupCommandOutput,
} from "@aws-sdk/client-auto-scaling";

/**
 * Sizing the EC2 eval tier to the grade queue. The decision is a pure function of (policy, state, observation), so
 * it is tested without AWS and any number of supervisor replicas reach the same answer from the same queue.
 */
export interface ScalePolicy {
  /** Concurrent grades one host runs. */
  gradesPerHost: number;
  maxHosts: number;
  /** How long the queue must stay empty before the tier goes to zero (hosts are slow to come back). */
  idleGraceMs: number;
  /** Minimum time between two scale-ins, so a queue that dips briefly does not kill hosts mid-grade. */
  scaleInCooldownMs: number;
}

export interface ScaleState {
  /** When the queue was first seen empty in the current idle stretch. */
  idleSinceMs?: number;
  lastScaleInMs?: number;
}

export interface ScaleDecision {
  desired: number;
  reason: string;
  state: ScaleState;
}

/**
 * `work` is grades waiting plus grades running (pending + ack-pending on the grade-jobs consumer): counting the
 * running ones keeps their hosts alive.
 */
export function decideEvalHosts(
  policy: ScalePolicy,
  state: ScaleState,
  obs: { nowMs: number; work: number; current: number },
): ScaleDecision {
  const { nowMs, work, current } = obs;
  if (work <= 0) {
    const idleSinceMs = state.idleSinceMs ?? nowMs;
    if (current === 0)
      return { desired: 0, reason: "idle, already at zero", state: { ...state, idleSinceMs } };
    if (nowMs - idleSinceMs >= policy.idleGraceMs) {
      return {
        desired: 0,
        reason: `idle for ${Math.round((nowMs - idleSinceMs) / 1000)}s: scale to zero`,
        state: { idleSinceMs, lastScaleInMs: nowMs },
      };
    }
    return { desired: current, reason: "idle, within grace", state: { ...state, idleSinceMs } };
  }
  const target = Math.min(policy.maxHosts, Math.ceil(work / Math.max(1, policy.gradesPerHost)));
  const busy: ScaleState = {
    ...(state.lastScaleInMs === undefined ? {} : { lastScaleInMs: state.lastScaleInMs }),
  };
  if (target > current)
    return { desired: target, reason: `queue ${work}: scale out to ${target}`, state: busy };
  if (target < current) {
    const since = state.lastScaleInMs === undefined ? Number.POSITIVE_INFINITY : nowMs - state.lastScaleInMs;
    if (since >= policy.scaleInCooldownMs) {
      return {
        desired: target,
        reason: `queue ${work}: scale in to ${target}`,
        state: { lastScaleInMs: nowMs },
      };
    }
    return { desired: current, reason: "scale-in cooldown", state: busy };
  }
  return { desired: current, reason: "steady", state: busy };
}

/** The Auto Scaling calls the adapter makes. `AutoScalingClient` satisfies it. */
export interface AutoScalingApi {
  send(command: DescribeAutoScalingGroupsCommand): Promise<DescribeAutoScalingGroupsCommandOutput>;
  send(command: UpdateAutoScalingGroupCommand): Promise<UpdateAutoScalingGroupCommandOutput>;
}

/** The eval tier's Auto Scaling group, as far as the scaler needs it. */
export class AsgCapacity {
  constructor(
    private readonly asg: AutoScalingApi,
    readonly groupName: string,
  ) {}

  async current(): Promise<{ desired: number; max: number }> {
    const out = await this.asg.send(
      new DescribeAutoScalingGroupsCommand({ AutoScalingGroupNames: [this.groupName] }),
    );
    const g = out.AutoScalingGroups?.[0];
    if (!g) throw new Error(`auto scaling group ${this.groupName} not found`);
    return { desired: g.DesiredCapacity ?? 0, max: g.MaxSize ?? 0 };
  }

  /** Set desired capacity, never above the group's max; MinSize follows to 0 so scale-to-zero is allowed. */
  async setDesired(desired: number): Promise<number> {
    const { max } = await this.current();
    const value = Math.max(0, Math.min(desired, max));
    await this.asg.send(
      new UpdateAutoScalingGroupCommand({
        AutoScalingGroupName: this.groupName,
        MinSize: 0,
        DesiredCapacity: value,
      }),
    );
    return value;
  }
}

/** One scaling tick: observe, decide, apply when the answer changed. Returns the decision for logging. */
export async function scaleTick(
  cap: AsgCapacity,
  policy: ScalePolicy,
  state: ScaleState,
  obs: { nowMs: number; work: number },
): Promise<ScaleDecision & { from: number }> {
  const { desired: current } = await cap.current();
  const d = decideEvalHosts(policy, state, { ...obs, current });
  if (d.desired !== current) await cap.setDesired(d.desired);
  return { ...d, from: current };
}
