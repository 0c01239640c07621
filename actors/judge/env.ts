/** Starting the judge from the environment, for `evalfleet actor judge` and the local launcher. */
import { ErrorCode, ValidationError } from "../../protocol/errors.js";
import type { Logger } from "../../protocol/log.js";
import type { Db } from "../../store/db.js";
import type { Actor } from "../runtime/actor.js";
import type { Plane } from "../runtime/connect.js";
import { type JudgeOptions, startJudge } from "./actor.js";

/**
 * EVALFLEET_JUDGE_URL (else EVALFLEET_GATEWAY_URL) is where judge calls go; EVALFLEET_JUDGE_KEY is the judge's own
 * key there. Both are required: a judge without its own key would bill someone else's.
 */
export function judgeEnv(
  env: NodeJS.ProcessEnv = process.env,
): Pick<JudgeOptions, "gatewayUrl" | "judgeKey"> {
  const gatewayUrl = env.EVALFLEET_JUDGE_URL ?? env.EVALFLEET_GATEWAY_URL;
  const judgeKey = env.EVALFLEET_JUDGE_KEY;
  const issues = [];
  if (!gatewayUrl)
    issues.push({
      path: "EVALFLEET_JUDGE_URL",
      reason: "set it (or EVALFLEET_GATEWAY_URL) to the gateway URL",
    });
  if (!judgeKey)
    issues.push({ path: "EVALFLEET_JUDGE_KEY", reason: "set it to the judge's own gateway key" });
  if (!gatewayUrl || !judgeKey)
    throw new ValidationError(ErrorCode.InvalidConfig, "the judge is not configured", issues);
  return { gatewayUrl, judgeKey };
}

export async function startJudgeFromEnv(
  ctx: { plane: Plane; db: Db; log: Logger },
  env: NodeJS.ProcessEnv = process.env,
): Promise<Actor> {
  return await startJudge({ ...ctx, ...judgeEnv(env) });
}
