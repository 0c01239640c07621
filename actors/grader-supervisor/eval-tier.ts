/**
 * The eval tier's scaler as it runs in production: inside a live grader-supervisor, every few seconds, sizing the
 * EC2 eval hosts' Auto Scaling group to the grade queue (waiting + running grades on the grade-jobs consumer).
 * The decision itself is the pure `decideEvalHosts` (scaler.ts); this is the loop, the observation and the log.
 */
import type { Logger } from "../../lib/log.js";
import type { Plane } from "../../plane/connect.js";
import { Consumers } from "../../protocol/topology.js";
import type { Actor } from "../runtime/actor.js";
import { type AsgCapacity, type ScalePolicy, type ScaleState, scaleTick } from "./scaler.js";

export interface EvalTierOptions {
  capacity: AsgCapacity;
  policy: ScalePolicy;
  intervalMs: number;
}

export const DEFAULT_SCALE_POLICY: ScalePolicy = {
  gradesPerHost: 8,
  maxHosts: 100,
  idleGraceMs: 10 * 60_000,
  scaleInCooldownMs: 5 * 60_000,
};

/** Grades waiting plus grades being worked on: what the eval hosts have to carry now. */
export async function gradeWork(plane: Plane): Promise<number> {
  const def = Consumers.graderSupervisor;
  const info = await plane.jsm.consumers.info(def.stream, def.durable);
  return info.num_pending + info.num_ack_pending;
}

/** Scale the eval tier from `actor`'s lifecycle: the loop stops when the actor drains. */
export function runEvalTierScaler(actor: Actor, plane: Plane, o: EvalTierOptions, log: Logger): void {
  let state: ScaleState = {};
  actor.every("eval-tier scaling", o.intervalMs, async () => {
    const work = await gradeWork(plane);
    const d = await scaleTick(o.capacity, o.policy, state, { nowMs: Date.now(), work });
    state = d.state;
    const fields = { asg: o.capacity.groupName, from: d.from, to: d.desired, work, reason: d.reason };
    if (d.desired !== d.from) log.info(fields, "eval tier scaled");
    else log.debug(fields, "eval tier unchanged");
  });
}
