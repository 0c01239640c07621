import { defineGroup, enumText, intText, optionalText, setting } from "./setting.js";

/**
 * The grader-supervisor's placement (one actor, three placements) and the eval tier's scaler:
 * - `take` (default; a laptop, `npm start`): grade here, in containers when Docker answers, else by the checkout
 *   grader for tasks shipped as folders;
 * - `docker` (an eval worker on an EC2 eval host): grade here, and refuse to start where no Docker answers;
 * - `none` (the Fargate service, which has no Docker): never take a grade job.
 * With EVALFLEET_EVAL_ASG set, the replica also runs the eval tier's scaler against that Auto Scaling group.
 */
export const GRADE_JOB_MODES = ["take", "docker", "none"] as const;
export type GradeJobMode = (typeof GRADE_JOB_MODES)[number];

export interface GraderSettings {
  gradeJobs: GradeJobMode;
  evalTier?: {
    asgName: string;
    policy: { gradesPerHost: number; maxHosts: number; idleGraceMs: number; scaleInCooldownMs: number };
    intervalMs: number;
  };
}

export const graderGroup = defineGroup({
  name: "grader",
  doc: "Where grade jobs are taken, and the eval tier's scaler (the container runtime: DOCKER_HOST, else the default socket).",
  settings: {
    gradeJobs: setting({
      env: "EVALFLEET_GRADE_JOBS",
      doc: "`take`: grade here (Docker when it answers); `docker`: grade here, Docker required (eval workers); `none`: leave grading to the eval workers",
      schema: enumText(GRADE_JOB_MODES),
      default: "take",
    }),
    asg: setting({
      env: "EVALFLEET_EVAL_ASG",
      doc: "the eval tier's Auto Scaling group: this replica runs its scaler (grade work → hosts)",
      schema: optionalText,
    }),
    gradesPerHost: setting({
      env: "EVALFLEET_GRADES_PER_HOST",
      doc: "scaler: grades one eval host carries at once",
      schema: intText(1, 10_000),
      default: "8",
    }),
    maxHosts: setting({
      env: "EVALFLEET_EVAL_HOSTS_MAX",
      doc: "scaler: most eval hosts",
      schema: intText(1, 100_000),
      default: "100",
    }),
    idleGraceS: setting({
      env: "EVALFLEET_EVAL_IDLE_GRACE_S",
      doc: "scaler: how long the tier stays up with no grade work (s)",
      schema: intText(1, 86_400),
      default: "600",
    }),
    cooldownS: setting({
      env: "EVALFLEET_EVAL_COOLDOWN_S",
      doc: "scaler: least time between two scale-ins (s)",
      schema: intText(1, 86_400),
      default: "300",
    }),
    intervalS: setting({
      env: "EVALFLEET_EVAL_SCALE_INTERVAL_S",
      doc: "scaler: how often it looks (s)",
      schema: intText(1, 3_600),
      default: "15",
    }),
  },
  compile: (v): GraderSettings => {
    const out: GraderSettings = { gradeJobs: v.gradeJobs };
    if (v.asg !== undefined)
      out.evalTier = {
        asgName: v.asg,
        policy: {
          gradesPerHost: v.gradesPerHost,
          maxHosts: v.maxHosts,
          idleGraceMs: v.idleGraceS * 1000,
          scaleInCooldownMs: v.cooldownS * 1000,
        },
        intervalMs: v.intervalS * 1000,
      };
    return out;
  },
});
