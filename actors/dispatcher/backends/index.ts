import { ErrorCode, EvalfleetError } from "../../../protocol/errors.js";
import type { Logger } from "../../../protocol/log.js";
import type { AttemptStatus } from "../../../protocol/messages.js";
import { ATTEMPT_STATUSES } from "../../../protocol/messages.js";
import type { Plane } from "../../runtime/connect.js";
import { LocalBackend } from "./local.js";
import { SimBackend } from "./sim.js";
import type { LaunchBackend } from "./types.js";

export const BACKEND_KINDS = ["local", "sim"] as const;
export type BackendKind = (typeof BACKEND_KINDS)[number];

/** "PATCH_READY=8,TIMEOUT=1,HARNESS_ERROR=1" → weights per status. */
export function parseMix(text: string): Partial<Record<AttemptStatus, number>> {
  const mix: Partial<Record<AttemptStatus, number>> = {};
  for (const part of text.split(",").filter(Boolean)) {
    const [name, weight] = part.split("=");
    const status = ATTEMPT_STATUSES.find((s) => s === name?.trim());
    const w = Number(weight);
    if (!status || !Number.isFinite(w) || w < 0)
      throw new EvalfleetError(
        ErrorCode.InvalidConfig,
        `EVALFLEET_SIM_MIX: "${part}" is not STATUS=weight (statuses: ${ATTEMPT_STATUSES.join(", ")})`,
      );
    mix[status] = w;
  }
  return mix;
}

/**
 * The launch backend chosen by the environment: EVALFLEET_BACKEND=local (default: a process per attempt running
 * `evalfleet task`) or sim (in-process simulated harness; EVALFLEET_SIM_CALLS, EVALFLEET_SIM_THINK_MS,
 * EVALFLEET_SIM_MIX; its shims forward where a task's would, EVALFLEET_UPSTREAM_URL with the run's key, else to a
 * scripted provider of its own). ECS needs account settings: build an EcsBackend (./ecs.ts) and pass it to
 * startDispatcher.
 */
export function backendFromEnv(
  plane: Plane,
  log: Logger,
  env: NodeJS.ProcessEnv = process.env,
): LaunchBackend {
  const kind = env.EVALFLEET_BACKEND ?? "local";
  if (kind === "sim") {
    return new SimBackend({
      plane,
      log,
      calls: Number(env.EVALFLEET_SIM_CALLS ?? 1),
      thinkMs: Number(env.EVALFLEET_SIM_THINK_MS ?? 50),
      ...(env.EVALFLEET_SIM_MIX ? { mix: parseMix(env.EVALFLEET_SIM_MIX) } : {}),
      ...(env.EVALFLEET_UPSTREAM_URL
        ? {
            upstream: {
              url: env.EVALFLEET_UPSTREAM_URL,
              ...(env.EVALFLEET_RUN_KEY ? { key: env.EVALFLEET_RUN_KEY } : {}),
            },
          }
        : {}),
    });
  }
  if (kind === "local") {
    return new LocalBackend({
      // The server this plane is connected to: `evalfleet up` may have started its own.
      natsUrl: env.NATS_URL ?? `nats://${plane.nc.getServer()}`,
      ...(env.DATABASE_URL ? { databaseUrl: env.DATABASE_URL } : {}),
      log,
    });
  }
  throw new EvalfleetError(
    ErrorCode.InvalidConfig,
    `EVALFLEET_BACKEND=${kind} is not one of ${BACKEND_KINDS.join(", ")}${kind === "ecs" ? " (ECS: construct EcsBackend from actors/dispatcher/backends/ecs.ts and pass it as `backend`)" : ""}`,
  );
}
