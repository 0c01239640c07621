import { z } from "zod";
import { ATTEMPT_STATUSES, type AttemptStatus } from "../protocol/messages.js";
import { defineGroup, enumText, intText, listText, optionalText, setting } from "./setting.js";

/** How the dispatcher launches attempts: the backend and each backend's own settings. */

export const BACKEND_KINDS = ["local", "sim", "ecs"] as const;
export type BackendKind = (typeof BACKEND_KINDS)[number];

export interface SimSettings {
  calls: number;
  thinkMs: number;
  mix?: Partial<Record<AttemptStatus, number>>;
  /** where the simulated attempts' shims forward (the gateway), else a scripted provider of the backend's own */
  upstream?: { url: string; key?: string };
}

export interface EcsSettings {
  cluster: string;
  /** harness task definition: family, family:revision or ARN */
  taskDefinition: string;
  containerName: string;
  subnets: string[];
  securityGroups: string[];
  capacityProvider: "FARGATE" | "FARGATE_SPOT";
}

/** Where a local backend's tasks run their harnesses (EVALFLEET_SANDBOX). */
export const SANDBOX_KINDS = ["auto", "container", "process"] as const;
export type SandboxKind = (typeof SANDBOX_KINDS)[number];

export type BackendSettings =
  | { kind: "local"; sandbox: SandboxKind }
  | { kind: "sim"; sim: SimSettings }
  | { kind: "ecs"; ecs: EcsSettings };

/** "PATCH_READY=8,TIMEOUT=1" → weights per status. */
const mixText = z
  .string()
  .optional()
  .transform((text, ctx) => {
    if (text === undefined) return undefined;
    const mix: Partial<Record<AttemptStatus, number>> = {};
    for (const part of text.split(",").filter((p) => p.trim() !== "")) {
      const [name, weight] = part.split("=");
      const status = ATTEMPT_STATUSES.find((s) => s === name?.trim());
      const w = Number(weight);
      if (!status || weight === undefined || !Number.isFinite(w) || w < 0) {
        ctx.addIssue({
          code: "custom",
          message: `"${part}" is not STATUS=weight (statuses: ${ATTEMPT_STATUSES.join(", ")})`,
        });
        return z.NEVER;
      }
      mix[status] = w;
    }
    return mix;
  });

const ECS_REQUIRED = [
  ["cluster", "EVALFLEET_ECS_CLUSTER"],
  ["taskDefinition", "EVALFLEET_HARNESS_TASK_FAMILY"],
] as const;

export const backendGroup = defineGroup({
  name: "backend",
  doc: "The dispatcher's launch backend.",
  settings: {
    kind: setting({
      env: "EVALFLEET_BACKEND",
      doc: "`local`: a process per attempt; `sim`: simulated in-process attempts; `ecs`: a Fargate task per attempt",
      schema: enumText(BACKEND_KINDS),
      default: "local",
    }),
    sandbox: setting({
      env: "EVALFLEET_SANDBOX",
      doc: "local: where harnesses run — `auto` (a container per attempt when a Docker API answers, else processes, said in the log), `container` (required), `process` (unsandboxed)",
      schema: enumText(SANDBOX_KINDS),
      default: "auto",
    }),
    simCalls: setting({
      env: "EVALFLEET_SIM_CALLS",
      doc: "sim: metered model calls per attempt, each through a real shim",
      schema: intText(0, 10_000),
      default: "1",
    }),
    simThinkMs: setting({
      env: "EVALFLEET_SIM_THINK_MS",
      doc: "sim: simulated harness time per attempt (ms)",
      schema: intText(0, 86_400_000),
      default: "50",
    }),
    simMix: setting({
      env: "EVALFLEET_SIM_MIX",
      doc: "sim: outcome weights, `PATCH_READY=8,TIMEOUT=1,HARNESS_ERROR=1`",
      schema: mixText,
      defaultDoc: "every attempt PATCH_READY",
    }),
    simKey: setting({
      env: "EVALFLEET_RUN_KEY",
      doc: "sim: the key its shims forward with (default: the run's key from KV, as a task reads it)",
      schema: optionalText,
      secret: true,
    }),
    ecsCluster: setting({
      env: "EVALFLEET_ECS_CLUSTER",
      doc: "ecs: the cluster harness tasks run in",
      schema: optionalText,
    }),
    ecsTaskDefinition: setting({
      env: "EVALFLEET_HARNESS_TASK_FAMILY",
      doc: "ecs: the harness task definition (family, family:revision or ARN)",
      schema: optionalText,
    }),
    ecsContainer: setting({
      env: "EVALFLEET_HARNESS_CONTAINER",
      doc: "ecs: the name of the harness task's task container: it alone gets the job reference and the attempt's NATS user (never the harness container)",
      schema: z.string().min(1),
      default: "task",
    }),
    ecsSubnets: setting({
      env: "EVALFLEET_TASK_SUBNETS",
      doc: "ecs: subnet ids for harness tasks, comma-separated",
      schema: listText,
    }),
    ecsSecurityGroups: setting({
      env: "EVALFLEET_TASK_SECURITY_GROUPS",
      doc: "ecs: security group ids for harness tasks, comma-separated",
      schema: listText,
    }),
    ecsCapacity: setting({
      env: "EVALFLEET_CAPACITY_PROVIDER",
      doc: "ecs: FARGATE, or FARGATE_SPOT (cheaper; interruptions are retried, never billed to the model)",
      schema: enumText(["FARGATE", "FARGATE_SPOT"] as const),
      default: "FARGATE",
    }),
  },
  compile: (v, ctx): BackendSettings => {
    if (v.kind === "local") return { kind: "local", sandbox: v.sandbox };
    if (v.kind === "sim") {
      const sim: SimSettings = { calls: v.simCalls, thinkMs: v.simThinkMs };
      if (v.simMix !== undefined) sim.mix = v.simMix;
      // Forward where a task would: the gateway, when this process was told where it is.
      if (
        ctx.source("EVALFLEET_GATEWAY_URL") !== "default" &&
        ctx.source("EVALFLEET_GATEWAY_URL") !== "unset"
      ) {
        const url = ctx.value<string>("EVALFLEET_GATEWAY_URL");
        if (url !== undefined) sim.upstream = { url, ...(v.simKey !== undefined ? { key: v.simKey } : {}) };
      }
      return { kind: "sim", sim };
    }
    const given = { cluster: v.ecsCluster, taskDefinition: v.ecsTaskDefinition };
    for (const [key, env] of ECS_REQUIRED)
      if (given[key] === undefined) ctx.issue(env, "is not set, and EVALFLEET_BACKEND=ecs needs it");
    if (v.ecsSubnets.length === 0)
      ctx.issue("EVALFLEET_TASK_SUBNETS", "lists no subnet, and EVALFLEET_BACKEND=ecs needs at least one");
    if (v.ecsSecurityGroups.length === 0)
      ctx.issue(
        "EVALFLEET_TASK_SECURITY_GROUPS",
        "lists no security group, and EVALFLEET_BACKEND=ecs needs one",
      );
    return {
      kind: "ecs",
      ecs: {
        cluster: v.ecsCluster ?? "",
        taskDefinition: v.ecsTaskDefinition ?? "",
        containerName: v.ecsContainer,
        subnets: v.ecsSubnets,
        securityGroups: v.ecsSecurityGroups,
        capacityProvider: v.ecsCapacity,
      },
    };
  },
});
