import type { KV } from "@nats-io/kv";
import type { Logger } from "../../lib/log.js";
import type { PoolLimits } from "../../pacer/bucket.js";
import { sizeFleet } from "../../pacer/fleet.js";
import { type PacerPools, poolConfig } from "../../pacer/local.js";
import type { Plane } from "../../plane/connect.js";
import { compareAndSet, TypedKv } from "../../plane/kv.js";
import { RunConfigSchema } from "../../protocol/config.js";
import { type RunProgress, RunProgressSchema } from "../../protocol/messages.js";
import { PacerOwnerSchema, PoolSizeRecordSchema } from "../../protocol/state.js";
import { ProgressKeys, StateKeys } from "../../protocol/subjects.js";
import type { Db } from "../../store/db.js";
import { type PoolObservations, poolObservations } from "../../store/ledger.js";
import { countOpenCellsOfPool, getRunMetadata } from "../../store/results.js";
import { poolCellPrefixes } from "./matrix.js";

/*
 * Fleet sizing for the dispatcher: per pool, how many attempts to run at once so the pool's limits are used and no
 * attempt waits on the pacer. Observations come from the ledger (this run's calls, or at plan time and early in a
 * run the pool's recent calls across runs), limits from the pacer's KV record (else configuration, else unknown:
 * no cap), and pacer/fleet.ts sizeFleet applies Little's law. The planner writes the result into the run's progress
 * key (`pools`, which the dispatcher reads as a per-pool cap; a pool with no cap is left out) and into
 * `pool.<run>.<pool>` with the reason, at plan time and every few seconds while the run goes.
 */

export type FleetSource = "run" | "history" | "prior" | "none";

export interface PoolFleet {
  /** attempts to run at once; null: no cap (no limits known) */
  fleetSize: number | null;
  inputs: Record<string, number>;
  source: FleetSource;
  binding: string;
  reason: string;
}

/**
 * With limits known but no call seen yet: a conservative prior. Large calls and short latency, back to back, so the
 * first size is small rather than too big; the ledger replaces it within one re-size once calls land.
 */
export const FLEET_PRIOR = {
  inputTokensPerCall: 8_000,
  outputTokensPerCall: 1_000,
  callLatencyMs: 2_000,
} as const;
/** Fewer calls than this in the run: the pool's history across runs is used instead (if it has as many). */
export const MIN_CALLS = 10;

export interface SizePoolInput {
  limits: PoolLimits | null;
  /** this run's calls on the pool, else the pool's recent history */
  observed: { from: "run" | "history"; obs: PoolObservations } | null;
  /** cells of the run on this pool not yet final: no point running more at once */
  pendingAttempts?: number;
  /** cache-read weight toward input TPM; default by provider (OpenAI 1, else 0 as Anthropic) */
  cacheReadInputWeight?: number;
  cacheWriteInputWeight?: number;
  /** the pacer's observed p95 of output tokens, used by the prior */
  outputTokensP95?: number;
  utilization?: number;
}

/** Pure: limits + observations → the pool's fleet size and every figure it came from. */
export function sizePool(input: SizePoolInput): PoolFleet {
  const limits = Object.fromEntries(
    Object.entries(input.limits ?? {}).filter(([, v]) => typeof v === "number" && v > 0),
  ) as PoolLimits;
  const pending = input.pendingAttempts;
  const base: Record<string, number> = {
    ...limits,
    ...(pending === undefined ? {} : { pendingAttempts: pending }),
  };
  if (Object.keys(limits).length === 0)
    return {
      fleetSize: null,
      inputs: { ...base, uncapped: 1 },
      source: "none",
      binding: "none",
      reason: "no limits known for the pool (pacer record or configuration): not capped",
    };
  const o = input.observed?.obs;
  let tokens: { inputTokens: number; outputTokens: number };
  let observed: Record<string, number>;
  let fleetObs: Parameters<typeof sizeFleet>[0]["observed"];
  if (o && input.observed) {
    const readW = input.cacheReadInputWeight ?? (o.provider === "openai" ? 1 : 0);
    const writeW = input.cacheWriteInputWeight ?? 1;
    tokens = {
      inputTokens: Math.max(
        0,
        Math.round(
          o.inputTokensPerCall -
            o.cacheReadTokensPerCall * (1 - readW) -
            o.cacheWriteTokensPerCall * (1 - writeW),
        ),
      ),
      outputTokens: Math.round(o.outputTokensPerCall),
    };
    const callsPerAttempt = o.attempts > 0 ? o.calls / o.attempts : 1;
    fleetObs = {
      tokensPerCall: tokens,
      callsPerAttempt,
      callLatencyMs: o.latencyMeanMs,
      ...(o.attemptDurationMs > 0 ? { attemptDurationMs: o.attemptDurationMs } : {}),
    };
    observed = {
      [input.observed.from === "run" ? "fromRun" : "fromHistory"]: 1,
      observedCalls: o.calls,
      observedAttempts: o.attempts,
      callsPerAttempt: round2(callsPerAttempt),
      attemptDurationMs: Math.round(o.attemptDurationMs),
      latencyP50Ms: Math.round(o.latencyP50Ms),
      latencyMeanMs: Math.round(o.latencyMeanMs),
    };
  } else {
    tokens = {
      inputTokens: FLEET_PRIOR.inputTokensPerCall,
      outputTokens: Math.max(FLEET_PRIOR.outputTokensPerCall, input.outputTokensP95 ?? 0),
    };
    fleetObs = { tokensPerCall: tokens, callsPerAttempt: 1, callLatencyMs: FLEET_PRIOR.callLatencyMs };
    observed = { prior: 1, latencyMeanMs: FLEET_PRIOR.callLatencyMs };
  }
  const s = sizeFleet({
    limits,
    observed: fleetObs,
    ...(input.utilization === undefined ? {} : { utilization: input.utilization }),
    ...(pending === undefined ? {} : { pendingAttempts: pending }),
  });
  const source: FleetSource = input.observed?.from ?? "prior";
  return {
    // The dispatcher treats 0 as "no cap"; a pool with nothing pending needs no slot, so 1 is as good as 0.
    fleetSize: Math.max(1, s.concurrency),
    inputs: {
      ...base,
      ...observed,
      inputTokensPerCall: tokens.inputTokens,
      outputTokensPerCall: tokens.outputTokens,
      utilization: s.inputs.utilization ?? 0.95,
      callsPerMinute: s.callsPerMinute,
      callsPerMinutePerAttempt: s.callsPerMinutePerAttempt,
      callsInFlight: s.callsInFlight,
    },
    source,
    binding: s.binding,
    reason:
      source === "prior"
        ? `no calls observed yet: conservative prior (${FLEET_PRIOR.inputTokensPerCall} input tokens, ${FLEET_PRIOR.callLatencyMs} ms per call, back to back); ${s.binding} binds`
        : `Little's law over ${o?.calls ?? 0} ${source === "run" ? "of this run's" : "recent"} calls; ${s.binding} binds`,
  };
}

const round2 = (n: number) => Math.round(n * 100) / 100;

// ---- observations (store/ledger.ts) and limits ---------------------------------------------------------------------------------

export interface FleetContext {
  db: Db;
  /** the `pacer` bucket: limits and settle statistics per pool */
  pacer: KV;
  /** configured limits, used when the pacer has none for a pool */
  pools?: PacerPools | undefined;
}

/** Size one pool of a run from everything known now. */
export async function sizeRunPool(
  ctx: FleetContext,
  run: string,
  pool: string,
  pendingAttempts?: number,
): Promise<PoolFleet> {
  const rec = (
    await new TypedKv(ctx.pacer, PacerOwnerSchema, "pacer pool record")
      .get(StateKeys.pacerPool(pool))
      .catch(() => null)
  )?.value;
  const cfg = ctx.pools ? poolConfig(ctx.pools, pool) : undefined;
  const recLimits = rec?.checkpoint?.limits ?? {};
  const limits = Object.keys(recLimits).length > 0 ? recLimits : (cfg?.limits ?? null);
  let observed: SizePoolInput["observed"] = null;
  const own = await poolObservations(ctx.db, pool, run);
  if (own && own.calls >= MIN_CALLS) observed = { from: "run", obs: own };
  else {
    const hist = await poolObservations(ctx.db, pool, null);
    if (hist && hist.calls >= MIN_CALLS) observed = { from: "history", obs: hist };
    else if (own) observed = { from: "run", obs: own };
  }
  return sizePool({
    limits,
    observed,
    pendingAttempts: pendingAttempts ?? (await openCellsOfPool(ctx.db, run, pool)),
    ...(cfg?.cacheReadInputWeight === undefined ? {} : { cacheReadInputWeight: cfg.cacheReadInputWeight }),
    ...(cfg?.cacheWriteInputWeight === undefined ? {} : { cacheWriteInputWeight: cfg.cacheWriteInputWeight }),
    ...(rec?.stats?.outputTokensP95 ? { outputTokensP95: rec.stats.outputTokensP95 } : {}),
  });
}

/** A pool's cells of the run not yet final (the pool is a model: its cells are every harness's with that model). */
async function openCellsOfPool(db: Db, run: string, pool: string): Promise<number> {
  const meta = await getRunMetadata(db, run);
  if (!meta) return 0;
  const config = RunConfigSchema.safeParse(JSON.parse(meta.configJson));
  return config.success ? countOpenCellsOfPool(db, run, poolCellPrefixes(config.data, pool)) : 0;
}

/** The run key's `pools`: capped pools only (the dispatcher reads a fleetSize > 0 as a cap). */
export function poolsField(sizes: Record<string, PoolFleet>): NonNullable<RunProgress["pools"]> {
  const out: NonNullable<RunProgress["pools"]> = {};
  for (const [pool, f] of Object.entries(sizes))
    if (f.fleetSize !== null) out[pool] = { fleetSize: f.fleetSize, inputs: f.inputs };
  return out;
}

/** Write `pool.<run>.<pool>` for each pool (the dashboard and `evalfleet status` read them). */
export async function putPoolKeys(
  progress: KV,
  run: string,
  sizes: Record<string, PoolFleet>,
): Promise<void> {
  const at = new Date().toISOString();
  const records = new TypedKv(progress, PoolSizeRecordSchema, "pool size");
  await Promise.all(
    Object.entries(sizes).map(([pool, f]) =>
      records.put(ProgressKeys.pool(run, pool), { run, pool, ...f, updatedAt: at }),
    ),
  );
}

const CAS_TRIES = 8;

/**
 * Merge `pools` into the run's progress key with compare-and-set: read, replace only `pools`, update on the revision,
 * retry on conflict — the results-writer's counters and everything else stay as they are. Returns whether it wrote.
 */
export async function mergeRunPools(
  progress: KV,
  run: string,
  pools: NonNullable<RunProgress["pools"]>,
): Promise<boolean> {
  return await compareAndSet(
    new TypedKv(progress, RunProgressSchema, "run progress"),
    ProgressKeys.run(run),
    (e) => {
      if (!e || JSON.stringify(e.value.pools ?? {}) === JSON.stringify(pools)) return { result: false };
      return { write: { ...e.value, pools }, result: true };
    },
    { tries: CAS_TRIES },
  );
}

/** The pools of a run, from its `pool.<run>.<pool>` keys (written at plan time, uncapped pools included). */
async function runPools(progress: KV, run: string): Promise<string[]> {
  const filter = ProgressKeys.poolsOfRun(run);
  const pools: string[] = [];
  const records = new TypedKv(progress, PoolSizeRecordSchema, "pool size");
  for await (const k of await progress.keys(filter)) {
    const pool = (await records.get(k))?.value.pool;
    if (pool !== undefined) pools.push(pool);
  }
  return pools;
}

/** Re-size every pool of one run and publish the result. */
export async function resizeRun(
  ctx: FleetContext,
  progress: KV,
  run: string,
): Promise<Record<string, PoolFleet>> {
  const sizes: Record<string, PoolFleet> = {};
  for (const pool of await runPools(progress, run)) sizes[pool] = await sizeRunPool(ctx, run, pool);
  await putPoolKeys(progress, run, sizes);
  await mergeRunPools(progress, run, poolsField(sizes));
  return sizes;
}

/** Runs whose progress key says they are still going. */
async function openRuns(progress: KV): Promise<string[]> {
  const runs: string[] = [];
  const progresses = new TypedKv(progress, RunProgressSchema, "run progress");
  for await (const k of await progress.keys(ProgressKeys.allRuns)) {
    const p = (await progresses.get(k))?.value;
    if (p?.run && (p.phase === "planned" || p.phase === "running" || p.phase === "draining"))
      runs.push(p.run);
  }
  return runs;
}

/** Re-size the open runs every intervalMs until the signal aborts. */
export function startFleetResizer(o: {
  plane: Plane;
  db: Db;
  log: Logger;
  signal: AbortSignal;
  intervalMs?: number;
  pools?: PacerPools | undefined;
}): { tick(): Promise<void> } {
  const ctx: FleetContext = { db: o.db, pacer: o.plane.kv.pacer, pools: o.pools };
  let running: Promise<void> = Promise.resolve();
  const tick = () => {
    running = running
      .then(async () => {
        for (const run of await openRuns(o.plane.kv.progress)) {
          if (o.signal.aborted) return;
          try {
            await resizeRun(ctx, o.plane.kv.progress, run);
          } catch (err) {
            o.log.warn({ run, err }, "fleet re-size failed; next interval retries");
          }
        }
      })
      .catch((err) => o.log.warn({ err }, "fleet re-size failed"));
    return running;
  };
  const timer = setInterval(() => void tick(), o.intervalMs ?? 15_000);
  timer.unref();
  o.signal.addEventListener("abort", () => clearInterval(timer), { once: true });
  return { tick };
}
