/** Starting the judge from its settings, for `evalfleet actor judge` and the local launcher. */

import type { Actor } from "../runtime/actor.js";
import type { ActorContext } from "../runtime/context.js";
import { startJudge } from "./actor.js";

/** The run name the judge's own gateway keys are recorded under. */
export const JUDGE_KEY_OWNER = "evalfleet-judge";

/**
 * The judge calls the gateway its settings name (EVALFLEET_JUDGE_URL, else EVALFLEET_GATEWAY_URL) with its own key:
 * EVALFLEET_JUDGE_KEY when given (one key for every call), else a key it mints per run in the database it shares
 * with the gateway (kind `judge`, capped at the run's budget, revoked with the run's keys), so a deployed judge
 * needs no secret of its own, never bills someone else's key, and no judge key sits in any process's environment.
 */
export async function startJudgeFromSettings(ctx: ActorContext): Promise<Actor> {
  const judge = ctx.settings.judge;
  if (!judge)
    throw new Error("startJudgeFromSettings: the judge's settings were not loaded (load the judge role)");
  return await startJudge({
    plane: ctx.plane,
    db: ctx.db,
    log: ctx.log,
    gatewayUrl: judge.gatewayUrl,
    ...(judge.judgeKey !== undefined ? { judgeKey: judge.judgeKey } : {}),
  });
}
