import type { Logger } from "../../protocol/log.js";
import type { Db } from "../../store/db.js";
import type { Actor } from "../runtime/actor.js";
import type { Plane } from "../runtime/connect.js";
import { type DispatcherOptions, startDispatcher } from "./actor.js";
import { backendFromEnv } from "./backends/index.js";

export { type DispatcherOptions, startDispatcher } from "./actor.js";
export { BACKEND_KINDS, backendFromEnv, parseMix } from "./backends/index.js";
export { LocalBackend, type LocalBackendOptions } from "./backends/local.js";
export { SimBackend, type SimBackendOptions } from "./backends/sim.js";
export { type ControlReply, requestControl } from "./control.js";

/** The dispatcher as `evalfleet actor dispatcher` / `up` start it: the backend from EVALFLEET_BACKEND. */
export async function startDispatcherActor(
  ctx: { plane: Plane; db: Db; log: Logger },
  opts: Partial<DispatcherOptions> = {},
): Promise<Actor> {
  return await startDispatcher({
    ...ctx,
    backend: opts.backend ?? backendFromEnv(ctx.plane, ctx.log),
    ...opts,
  });
}
