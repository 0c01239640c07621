/**
 * A dispatcher in its own process for the chaos run: `evalfleet actor dispatcher` (the backend from
 * EVALFLEET_BACKEND — sim attempts whose shims forward to EVALFLEET_GATEWAY_URL with the run's key from the jobs
 * bucket, or local `evalfleet task` processes), with the reaper's timings in seconds instead of the production tens
 * of seconds, so a dead replica's attempts are found within the chaos window. NATS_URL and DATABASE_URL from the
 * environment, SIGTERM drains, SIGKILL is a crash.
 */
import { startDispatcherActor } from "../../actors/dispatcher/index.js";
import { openDatabase, untilSignal } from "../../actors/runtime/main.js";
import { loadSettings } from "../../config/index.js";
import { createLogger } from "../../lib/log.js";
import { openPlane } from "../../plane/connect.js";

const env = process.env;
const settings = loadSettings("dispatcher");
const log = createLogger({ name: "chaos-dispatcher", level: settings.log.level });
const plane = await openPlane({
  name: "chaos-dispatcher",
  nats: settings.nats,
  streamReplicas: settings.topology.streamReplicas,
  streamMaxBytes: settings.topology.streamMaxBytes,
});
const opened = await openDatabase(settings.database, { command: "chaos-dispatcher", log });
const db = opened.db;
// As `evalfleet actor dispatcher` starts it (its backend, the tasks' environment, the NATS signing key that mints
// each attempt's user), with the chaos timings.
const actor = await startDispatcherActor(
  { plane, db, log, settings },
  {
    staleClaimMs: Number(env.CHAOS_STALE_CLAIM_MS ?? 6_000),
    reapMs: Number(env.CHAOS_REAP_MS ?? 2_000),
    observeMs: 300,
    retryDelaysMs: [500, 1_000, 2_000],
  },
);
process.stdout.write("dispatcher ready\n");
await untilSignal(log);
await actor.drain(5_000);
await plane.close();
await opened.close();
