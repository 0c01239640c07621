/**
 * Starting the grader-supervisor from its settings (config/grader.ts), for `evalfleet actor grader-supervisor`, `evalfleet eval-worker`
 * and the local launcher. One actor, three placements:
 *
 * - `take` (default; a laptop, `npm start`): grade jobs are graded here, in containers when Docker answers, else by
 *   the checkout grader for tasks shipped as folders;
 * - `docker` (an eval worker on an EC2 eval host): grade here, and refuse to start where no Docker answers;
 * - `none` (the Fargate service in the stack, which has no Docker): never take a grade job. Grading a SWE-bench
 *   task without Docker can only end as INFRA_FAILURE, so such a replica leaves the jobs to the eval workers.
 *
 * With EVALFLEET_EVAL_ASG set, the replica also runs the eval tier's scaler against that Auto Scaling group.
 */

import { AutoScalingClient } from "@aws-sdk/client-auto-scaling";
import type { GraderSettings } from "../../config/index.js";
import { ContainerRuntime } from "../../containers/index.js";
import { ErrorCode, ValidationError } from "../../protocol/errors.js";
import type { Actor } from "../runtime/actor.js";
import type { ActorContext } from "../runtime/context.js";
import { type GraderSupervisorOptions, startGraderSupervisor } from "./actor.js";
import { AsgCapacity } from "./scaler.js";

/** Whether a Docker API answers here: its version, or null (the reason is logged by the caller). */
export async function dockerAnswers(
  env: Readonly<Record<string, string | undefined>>,
): Promise<string | null> {
  const probe = await ContainerRuntime.probe({ env: env as NodeJS.ProcessEnv });
  return probe.ok ? probe.runtime.info.serverVersion : null;
}

export async function startGraderSupervisorFromSettings(
  ctx: ActorContext,
  overrides: Partial<GraderSettings> = {},
  opts: Partial<GraderSupervisorOptions> = {},
): Promise<Actor> {
  const given = ctx.settings.grader;
  if (!given)
    throw new Error(
      "startGraderSupervisorFromSettings: the grader's settings were not loaded (load its role)",
    );
  const s = { ...given, ...overrides };
  const env = ctx.settings.host.inheritedEnv;
  if (s.gradeJobs === "docker") {
    const version = await dockerAnswers(env);
    if (!version)
      throw new ValidationError(ErrorCode.InvalidConfig, "an eval worker grades only where Docker is", [
        {
          path: "DOCKER_HOST",
          reason: `no Docker API answered (at DOCKER_HOST, or the default socket): mount the host's /var/run/docker.sock (or set DOCKER_HOST), or run the grader-supervisor with EVALFLEET_GRADE_JOBS=take`,
        },
      ]);
    ctx.log.info({ docker: version }, "eval worker: grading with the host's Docker");
  }
  return await startGraderSupervisor({
    plane: ctx.plane,
    db: ctx.db,
    log: ctx.log,
    env,
    ...opts,
    gradeJobs: s.gradeJobs !== "none",
    ...(s.evalTier
      ? {
          evalTier: {
            capacity: new AsgCapacity(new AutoScalingClient({}), s.evalTier.asgName),
            policy: s.evalTier.policy,
            intervalMs: s.evalTier.intervalMs,
          },
        }
      : {}),
  });
}
