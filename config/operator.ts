import { defineGroup, listText, optionalText, setting } from "./setting.js";

/** `evalfleet teardown`: which cluster's harness tasks to stop and which eval tier to scale to zero. */
export interface TeardownSettings {
  cluster?: string;
  asgs: string[];
  region?: string;
}

export const teardownGroup = defineGroup({
  name: "teardown",
  doc: "The ECS cluster and eval tier `teardown` acts on.",
  settings: {
    cluster: setting({
      env: "EVALFLEET_ECS_CLUSTER",
      flag: "cluster",
      doc: "the ECS cluster harness tasks run in",
      schema: optionalText,
    }),
    asgs: setting({
      env: "EVALFLEET_EVAL_ASG",
      flag: "asg",
      doc: "the eval tier's Auto Scaling group names, comma-separated",
      schema: listText,
    }),
    region: setting({
      env: "AWS_REGION",
      flag: "region",
      doc: "AWS region (default: the AWS SDK's own resolution)",
      schema: optionalText,
    }),
  },
  compile: (v): TeardownSettings => {
    const out: TeardownSettings = { asgs: v.asgs };
    if (v.cluster !== undefined) out.cluster = v.cluster;
    if (v.region !== undefined) out.region = v.region;
    return out;
  },
});
