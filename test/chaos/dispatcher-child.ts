/**
 * A dispatcher in its own process for the chaos run: `evalfleet actor dispatcher` (the backend from
 * EVALFLEET_BACKEND — sim attempts whose shims forward to EVALFLEET_UPSTREAM_URL with the run's key from the jobs
 * bucket, or local `evalfleet task` processes), with the reaper's timings in seconds instead of the production tens
 * of seconds, so a dead replica's attempts are found within the chaos window. NATS_URL and DATABASE_URL from the
 * environment, SIGTERM drains, SIGKILL is a crash.
 */
import { startDispatcher } from "../../actors/dispatcher/actor.js";
import { backendFromEnv } from "../../actors/dispatcher/backends/index.js";
import { openPlane } from "../../actors/runtime/connect.js";
import { openResultsDb, untilSignal } from "../../actors/runtime/main.js";
import { createLogger } from "../../protocol/log.js";

const env = process.env;
const log = createLogger({ name: "chaos-dispatcher" });
const plane = await openPlane({ name: "chaos-dispatcher" });
const db = await openResultsDb({ log });
const backend = backendFromEnv(plane, log);
const actor = await startDispatcher({
  plane,
  db,
  log,
  backend,
  staleClaimMs: Number(env.CHAOS_STALE_CLAIM_MS ?? 6_000),
  reapMs: Number(env.CHAOS_REAP_MS ?? 2_000),
  observeMs: 300,
  retryDelaysMs: [500, 1_000, 2_000],
});
process.stdout.write("dispatcher ready\n");
await untilSignal(log);
await actor.drain(5_000);
await backend.close();
await plane.close();
await db.close();
