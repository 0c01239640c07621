import type { Logger } from "../protocol/log.js";
import type { Db } from "../store/db.js";
import { startDispatcherActor } from "./dispatcher/index.js";
import { startGraderSupervisor } from "./grader-supervisor/actor.js";
import { startJudgeFromEnv } from "./judge/env.js";
import { startPlanner } from "./planner/actor.js";
import { startResultsWriter } from "./results-writer/actor.js";
import type { Actor } from "./runtime/actor.js";
import type { Plane } from "./runtime/connect.js";

/** What every actor is started with. */
export interface ActorContext {
  plane: Plane;
  db: Db;
  log: Logger;
}

/** Every actor `evalfleet actor <name>` and `evalfleet up` can start. */
export const ACTORS: Record<string, (ctx: ActorContext) => Promise<Actor>> = {
  planner: (ctx) => startPlanner(ctx),
  /** launches through EVALFLEET_BACKEND (local | sim; default local) */
  dispatcher: (ctx) => startDispatcherActor(ctx),
  "results-writer": (ctx) => startResultsWriter(ctx),
  "grader-supervisor": (ctx) => startGraderSupervisor(ctx),
  /** needs EVALFLEET_JUDGE_URL (or EVALFLEET_GATEWAY_URL) and EVALFLEET_JUDGE_KEY */
  judge: (ctx) => startJudgeFromEnv(ctx),
};

export function actorNames(): string[] {
  return Object.keys(ACTORS).sort();
}
