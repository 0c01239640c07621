import type { ActorSettings } from "../../config/index.js";
import type { Logger } from "../../lib/log.js";
import type { Plane } from "../../plane/connect.js";
import type { Db } from "../../store/db.js";

/** What every actor is started with. */
export interface ActorContext {
  plane: Plane;
  db: Db;
  log: Logger;
  /** this process's settings, loaded once at start (config/) */
  settings: ActorSettings;
}
