import type { ActorSettings } from "../config/index.js";
import { startDispatcherActor } from "./dispatcher/index.js";
import { startGraderSupervisorFromSettings } from "./grader-supervisor/env.js";
import { startJudgeFromSettings } from "./judge/env.js";
import { startPlanner } from "./planner/actor.js";
import { startResultsWriter } from "./results-writer/actor.js";
import type { Actor } from "./runtime/actor.js";
import type { ActorContext } from "./runtime/context.js";

export type { ActorContext } from "./runtime/context.js";

/** Every actor `evalfleet actor <name>` and `evalfleet up` can start. */
export const ACTORS: Record<string, (ctx: ActorContext) => Promise<Actor>> = {
  /** reads task libraries under EVALFLEET_TASK_LIBRARY_ROOTS (default: <state-dir>/libraries, examples/) */
  planner: (ctx) => startPlanner({ ...ctx, libraryRoots: plannerLibrary(ctx).roots }),
  /** launches through the backend its settings name (EVALFLEET_BACKEND: local | sim | ecs) */
  dispatcher: (ctx) => startDispatcherActor(ctx),
  "results-writer": (ctx) => startResultsWriter(ctx),
  /** EVALFLEET_GRADE_JOBS (take | docker | none) and, with EVALFLEET_EVAL_ASG, the eval tier's scaler; graded
   * processes get this process's environment without its secrets */
  "grader-supervisor": (ctx) => startGraderSupervisorFromSettings(ctx),
  /** calls the gateway (EVALFLEET_JUDGE_URL, else EVALFLEET_GATEWAY_URL) with its own key */
  judge: (ctx) => startJudgeFromSettings(ctx),
};

function plannerLibrary(ctx: ActorContext): NonNullable<ActorSettings["library"]> {
  if (!ctx.settings.library)
    throw new Error("the planner's settings were not loaded (load the planner role)");
  return ctx.settings.library;
}

export function actorNames(): string[] {
  return Object.keys(ACTORS).sort();
}
