import type { Command } from "commander";
import {
  LiveKeys,
  LiveState,
  STALE_HEARTBEAT_MS,
  STALE_PACER_MS,
  snapshotBucket,
  summarize,
} from "../dashboard/live.js";
import { usd } from "../report/format.js";
import { printJson, table } from "./output.js";
import { duration, openViewerPlane } from "./watch.js";

/** Everything `status` shows, computed from one snapshot of the progress and pacer buckets. */
export function statusOf(state: LiveState, nowMs: number) {
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
  return { runs, actors, pools };
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
            a.stale ? `STALE (${a.state})` : a.state,
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
  return `Runs\n${runs}\n\nActors\n${actors}\n\nPools\n${pools}`;
}

export function register(program: Command): void {
  program
    .command("status")
    .description("Runs (progress keys), actors (heartbeats; stale ones marked) and pools (pacer), from KV")
    .option("--json", "print the status as one JSON object")
    .action(async (flags: { json?: boolean }) => {
      const plane = await openViewerPlane("evalfleet-status");
      try {
        const state = new LiveState();
        await Promise.all([
          snapshotBucket(plane.kv.progress, LiveKeys.runs, (e) => state.applyProgress(e)),
          snapshotBucket(plane.kv.progress, LiveKeys.actors, (e) => state.applyProgress(e)),
          snapshotBucket(plane.kv.progress, LiveKeys.pools, (e) => state.applyProgress(e)),
          snapshotBucket(plane.kv.pacer, LiveKeys.pacerPools, (e) => state.applyPacer(e)),
        ]);
        const s = statusOf(state, Date.now());
        if (flags.json) printJson(s);
        else process.stdout.write(`${formatStatus(s)}\n`);
      } finally {
        await plane.close();
      }
    });
}
