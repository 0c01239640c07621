/**
 * A dispatcher in its own process for the chaos run: the sim backend, but forwarding to the chaos script's
 * scripted provider (CHAOS_UPSTREAM_URL / CHAOS_UPSTREAM_KEY) instead of one started inside this process — with
 * `EVALFLEET_BACKEND=sim` the provider would die with the dispatcher at every SIGKILL and take its bill along, so
 * the ledger could not be checked against it. Everything else is `evalfleet actor dispatcher`: NATS_URL and
 * DATABASE_URL from the environment, SIGTERM drains, SIGKILL is a crash.
 */
import { startDispatcher } from "../../actors/dispatcher/actor.js";
import { parseMix } from "../../actors/dispatcher/backends/index.js";
import { SimBackend } from "../../actors/dispatcher/backends/sim.js";
import { openPlane } from "../../actors/runtime/connect.js";
import { openResultsDb, untilSignal } from "../../actors/runtime/main.js";
import { createLogger } from "../../protocol/log.js";

const env = process.env;
const upstreamUrl = env.CHAOS_UPSTREAM_URL;
const upstreamKey = env.CHAOS_UPSTREAM_KEY;
if (!upstreamUrl || !upstreamKey) throw new Error("CHAOS_UPSTREAM_URL and CHAOS_UPSTREAM_KEY are required");
const log = createLogger({ name: "chaos-dispatcher" });
const plane = await openPlane({ name: "chaos-dispatcher" });
const db = await openResultsDb({ log });
const backend = new SimBackend({
  plane,
  log,
  calls: Number(env.EVALFLEET_SIM_CALLS ?? 3),
  thinkMs: Number(env.EVALFLEET_SIM_THINK_MS ?? 2_000),
  ...(env.EVALFLEET_SIM_MIX ? { mix: parseMix(env.EVALFLEET_SIM_MIX) } : {}),
  upstream: { url: upstreamUrl, key: upstreamKey },
  usagePerCall: { input: 1_000, output: 100 },
});
const actor = await startDispatcher({
  plane,
  db,
  log,
  backend,
  // Seconds, not the production tens of seconds: a dead replica's attempts are found within the chaos window.
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
