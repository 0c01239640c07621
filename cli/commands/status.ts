import type { Command } from "commander";
import { loadSettings } from "../../config/index.js";
import {
  LiveKeys,
  LiveState,
  STALE_HEARTBEAT_MS,
  STALE_PACER_MS,
  snapshotBucket,
  summarize,
} from "../../dashboard/live.js";
import { table } from "../../lib/table.js";
import { planeNats } from "../../local/plane-nats.js";
import { type StorageHealth, storageHealth } from "../../plane/health.js";
import { usd } from "../../report/format.js";
import { printJson } from "./output.js";
import { duration, openViewerPlane } from "./watch.js";

/** Everything `status` shows, computed from one snapshot of the progress and pacer buckets. */
export function statusOf(state: LiveState, nowMs: number, storage: StorageHealth | null = null) {
  const runs = state.runNames().map((r) => summarize(state, r)!);
  const actors = [...state.actors.values()]
    .map((h) => {
      const ageMs = nowMs - Date.parse(h.at);
      const stale = h.state !== "stopped" && !(ageMs <= STALE_HEARTBEAT_MS);
      return { ...h, ageMs, stale };
    })
    .sort((a, b) => a.actor.localeCompare(b.actor) || a.id.localeCompare(b.id));
  const fleet: Record<string, number> = {};
  for (const r of runs)
    for (const [pool, size] of Object.entries(r.fleet)) fleet[pool] = (fleet[pool] ?? 0) + size;
  const poolNames = new Set([...state.pacer.keys(), ...Object.keys(fleet)]);
  const pools = [...poolNames].sort().map((pool) => {
    const p = state.pacer.get(pool);
    return {
      pool,
      owner: p?.owner ?? null,
      ownerAlive: p ? p.owner !== null && nowMs - p.heartbeatWallMs <= STALE_PACER_MS : false,
      limits: p?.limits ?? {},
      pausedForMs: p && p.pausedUntilWallMs > nowMs ? p.pausedUntilWallMs - nowMs : 0,
      settledCalls: p?.settledCalls ?? 0,
      fleetSize: fleet[pool] ?? null,
    };
  });
  return { runs, actors, pools, storage };
}

function storageLine(h: StorageHealth | null): string {
  if (!h) return "";
  const stored = h.storedBytes === null ? "" : `${(h.storedBytes / 1024 / 1024).toFixed(1)} MB stored; `;
  if (h.writable) return `JetStream: ${stored}writes go through`;
  return h.full
    ? `JetStream: FULL — ${stored}the plane launches nothing until space returns. ${h.detail}`
    : `JetStream: writes fail — ${stored}${h.detail}`;
}

export function formatStatus(s: ReturnType<typeof statusOf>): string {
  const runs =
    s.runs.length === 0
      ? "  (none — submit one with: evalfleet submit run.yaml)"
      : table(
          [
            "Run",
            "Phase",
            "Cells",
            "Completed",
            "Failed",
            "Skipped",
            "Running",
            "Pending",
            "Billable / cap",
            "Total",
            "Updated",
          ],
          s.runs.map((r) => [
            r.run,
            r.phase,
            String(r.totalCells),
            String(r.completed),
            String(r.failed),
            String(r.skipped),
            String(r.running),
            String(r.pending),
            `${usd(r.billableCostNanoUsd)} / ${r.budgetNanoUsd === null ? "no cap" : usd(r.budgetNanoUsd)}`,
            usd(r.totalCostNanoUsd),
            r.updatedAt,
          ]),
        );
  const actors =
    s.actors.length === 0
      ? "  (no heartbeats — start the plane with: evalfleet up)"
      : table(
          ["Actor", "Id", "State", "Host", "PID", "Handled", "Failed", "Last heartbeat"],
          s.actors.map((a) => [
            a.actor,
            a.id,
            a.stale ? `STALE (${a.state})` : a.blocked ? `HELD UP (${a.state})` : a.state,
            a.host,
            String(a.pid),
            String(a.handled),
            String(a.failed),
            `${duration(a.ageMs)} ago`,
          ]),
        );
  const pools =
    s.pools.length === 0
      ? "  (no pacer pools yet)"
      : table(
          ["Pool", "Pacer owner", "Limits", "Paused", "Settled calls", "Fleet"],
          s.pools.map((p) => [
            p.pool,
            p.owner === null ? "none" : `${p.owner.slice(0, 8)}${p.ownerAlive ? "" : " (gone)"}`,
            Object.entries(p.limits)
              .map(([k, v]) => `${k}=${v}`)
              .join(" ") || "—",
            p.pausedForMs > 0 ? duration(p.pausedForMs) : "no",
            String(p.settledCalls),
            p.fleetSize === null ? "—" : String(p.fleetSize),
          ]),
        );
  const held = s.actors.filter((a) => a.blocked && !a.stale);
  const why = held.length ? `\n${held.map((a) => `  ${a.actor} ${a.id}: ${a.blocked}`).join("\n")}` : "";
  const body = `Runs\n${runs}\n\nActors\n${actors}${why}\n\nPools\n${pools}`;
  // A plane that cannot write leads with it; one that can says so last.
  const storage = storageLine(s.storage);
  if (!storage) return body;
  return s.storage?.writable ? `${body}\n\n${storage}` : `${storage}\n\n${body}`;
}

export function register(program: Command): void {
  program
    .command("status")
    .description("Runs (progress keys), actors (heartbeats; stale ones marked) and pools (pacer), from KV")
    .option("--json", "print the status as one JSON object")
    .option(
      "--state-dir <dir>",
      "the state folder of the `up` to find when NATS_URL is unset (default .evalfleet)",
    )
    .action(async (flags: { json?: boolean; stateDir?: string }) => {
      const plane = await openViewerPlane(
        "evalfleet-status",
        await planeNats(loadSettings("operator", { flags: { stateDir: flags.stateDir } })),
      );
      try {
        const state = new LiveState();
        await Promise.all([
          snapshotBucket(plane.kv.progress, LiveKeys.runs, (e) => state.applyProgress(e)),
          snapshotBucket(plane.kv.progress, LiveKeys.actors, (e) => state.applyProgress(e)),
          snapshotBucket(plane.kv.progress, LiveKeys.pools, (e) => state.applyProgress(e)),
          snapshotBucket(plane.kv.pacer, LiveKeys.pacerPools, (e) => state.applyPacer(e)),
        ]);
        const s = statusOf(state, Date.now(), await storageHealth(plane));
        if (flags.json) printJson(s);
        else process.stdout.write(`${formatStatus(s)}\n`);
      } finally {
        await plane.close();
      }
    });
}
