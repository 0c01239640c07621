import { taskEnv } from "../../config/index.js";
import type { Actor } from "../runtime/actor.js";
import type { ActorContext } from "../runtime/context.js";
import { type DispatcherOptions, startDispatcher } from "./actor.js";
import { backendFromSettings } from "./backends/index.js";

export { type DispatcherOptions, startDispatcher } from "./actor.js";
export { BACKEND_KINDS, backendFromSettings } from "./backends/index.js";
export { LocalBackend, type LocalBackendOptions } from "./backends/local.js";
export { SimBackend, type SimBackendOptions } from "./backends/sim.js";
export { type ControlReply, requestControl } from "./control.js";

/**
 * The dispatcher as `evalfleet actor dispatcher` / `up` start it: the backend its settings choose. Tasks a local
 * backend starts get this process's NATS connection and gateway, plus the task folders and pacing of a local plane.
 */
export async function startDispatcherActor(
  ctx: ActorContext,
  opts: Partial<DispatcherOptions> = {},
): Promise<Actor> {
  const s = ctx.settings;
  if (!s.backend || !s.gatewayUrl)
    throw new Error(
      "startDispatcherActor: the dispatcher's settings were not loaded (load the dispatcher role)",
    );
  const forTasks = s.task
    ? taskEnv({
        nats: s.nats,
        gatewayUrl: s.gatewayUrl.url,
        workRoot: s.task.workRoot,
        mirrorRoot: s.task.mirrorRoot,
        pacer: s.task.pacer,
        pacerOwn: s.task.pacerOwn,
        keepWorkdir: s.task.keepWorkdir,
        ...(s.task.gitRemoteBase ? { gitRemoteBase: s.task.gitRemoteBase } : {}),
      })
    : {};
  const backend =
    opts.backend ??
    (await backendFromSettings(
      ctx.plane,
      ctx.log,
      { nats: s.nats, log: s.log, backend: s.backend, gatewayUrl: s.gatewayUrl },
      { taskEnv: forTasks, inheritedEnv: s.host.inheritedEnv },
    ));
  // Tasks never get this process's own NATS credential: without a signing key they get none at all.
  if (!s.nats.signer && s.backend.kind !== "sim" && s.nats.auth.kind !== "none")
    ctx.log.warn(
      "no NATS signing key (NATS_ACCOUNT + NATS_SIGNING_KEY): attempts get no NATS user of their own, and their tasks cannot connect to a server that refuses anonymous clients",
    );
  return await startDispatcher({
    plane: ctx.plane,
    db: ctx.db,
    log: ctx.log,
    ...(s.nats.signer ? { natsSigner: s.nats.signer } : {}),
    ...opts,
    backend,
  });
}
