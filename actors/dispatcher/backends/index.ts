import { type ActorSettings, taskEnv } from "../../../config/index.js";
import type { Logger } from "../../../lib/log.js";
import type { Plane } from "../../../plane/connect.js";
import { LocalBackend } from "./local.js";
import { SimBackend } from "./sim.js";
import type { LaunchBackend } from "./types.js";

export { BACKEND_KINDS, type BackendKind } from "../../../config/index.js";

/** What choosing and building a backend needs from the dispatcher's settings. */
export type BackendInputs = Pick<ActorSettings, "nats" | "log"> &
  Required<Pick<ActorSettings, "backend" | "gatewayUrl">>;

/**
 * The launch backend the settings choose (EVALFLEET_BACKEND): `local` (default: a process per attempt running
 * `evalfleet task`, handed this dispatcher's NATS connection and gateway), `sim` (in-process simulated harness;
 * its shims forward where a task's would — the gateway, when EVALFLEET_GATEWAY_URL is given — else to a scripted
 * provider of its own) or `ecs` (a Fargate task per attempt, in the cluster, task family, subnets and security
 * groups the settings name; the AWS SDK resolves region and credentials as it always does).
 */
export async function backendFromSettings(
  plane: Plane,
  log: Logger,
  s: BackendInputs,
  opts: { taskEnv?: Record<string, string>; inheritedEnv?: Readonly<Record<string, string>> } = {},
): Promise<LaunchBackend> {
  const b = s.backend;
  if (b.kind === "sim") {
    return new SimBackend({
      plane,
      log,
      calls: b.sim.calls,
      thinkMs: b.sim.thinkMs,
      ...(b.sim.mix ? { mix: b.sim.mix } : {}),
      ...(b.sim.upstream ? { upstream: b.sim.upstream } : {}),
    });
  }
  if (b.kind === "ecs") {
    // Loaded on demand: only an ECS dispatcher needs the AWS SDK.
    const [{ ECSClient }, { EcsBackend }] = await Promise.all([
      import("@aws-sdk/client-ecs"),
      import("./ecs.js"),
    ]);
    return new EcsBackend({
      ecs: new ECSClient({}),
      cluster: b.ecs.cluster,
      taskDefinition: b.ecs.taskDefinition,
      containerName: b.ecs.containerName,
      subnets: b.ecs.subnets,
      securityGroups: b.ecs.securityGroups,
      capacityProvider: b.ecs.capacityProvider,
      log,
    });
  }
  return new LocalBackend({
    sandbox: b.sandbox,
    env: {
      ...taskEnv({ nats: s.nats, gatewayUrl: s.gatewayUrl.url, logLevel: s.log.level }),
      ...opts.taskEnv,
    },
    ...(opts.inheritedEnv ? { inheritedEnv: opts.inheritedEnv } : {}),
    log,
  });
}
