import type { KV, KvEntry } from "@nats-io/kv";
import {
  type CellProgress,
  CellProgressSchema,
  type Heartbeat,
  HeartbeatSchema,
  type RunProgress,
  RunProgressSchema,
} from "../protocol/messages.js";
import { decodeToken } from "../protocol/names.js";
import { ProgressKeys, StateKeys } from "../protocol/subjects.js";

/*
 * Live state as the `progress` and `pacer` KV buckets hold it, folded from watch entries. Shared by `watch`,
 * `status` and the dashboard: liveness and progress come from KV only, never from the database. Keys are
 * classified by their first token; values are validated with the protocol schemas, and a value that does not
 * parse is ignored (a newer writer's shape must not crash a viewer).
 */

/** `<first token>.>` of a key built by protocol/, so no key prefix is spelled out here. */
const wildcardOf = (key: string) => `${key.slice(0, key.indexOf("."))}.>`;

/** Wildcards over the key families viewers watch (protocol/ has builders for single keys only). */
export const LiveKeys = {
  runs: wildcardOf(ProgressKeys.run("_")),
  actors: wildcardOf(ProgressKeys.actor("_", "_")),
  pools: wildcardOf(ProgressKeys.pool("_", "_")),
  pacerPools: wildcardOf(StateKeys.pacerPool("_")),
} as const;

/** An actor is stale when its last heartbeat is older than this (heartbeats come every 5 s). */
export const STALE_HEARTBEAT_MS = 15_000;
/** A pacer pool owner is gone when its record has not been rewritten for this long (it beats every 250 ms). */
export const STALE_PACER_MS = 5_000;

/** A cell as the grid needs it. */
export interface LiveCell {
  cellId: string;
  status: CellProgress["status"];
  attempt: number;
  costNanoUsd: number;
  tokens: number;
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
  reasoningTokens: number;
  pacerWaitMs: number;
  turns: number;
  detail?: string;
  updatedAt: string;
}

/** The `pacer` bucket's owner record, as far as a viewer needs it. */
export interface PacerPool {
  pool: string;
  owner: string | null;
  heartbeatWallMs: number;
  limits: Record<string, number>;
  pausedUntilWallMs: number;
  overloadStreak: number;
  settledCalls: number;
  outputTokensP95: number;
}

export type Change =
  | { kind: "run"; run: string }
  | { kind: "cell"; run: string; cell: LiveCell }
  | { kind: "cellDeleted"; run: string; cellId: string }
  | { kind: "actor" }
  | { kind: "pacer" }
  | { kind: "pool"; run: string };

function json(value: Uint8Array): unknown {
  if (value.length === 0) return undefined;
  try {
    return JSON.parse(new TextDecoder().decode(value));
  } catch {
    return undefined;
  }
}

export function liveCell(p: CellProgress): LiveCell {
  const u = p.usage;
  return {
    cellId: p.cellId,
    status: p.status,
    attempt: p.attempt,
    costNanoUsd: u.costNanoUsd,
    tokens: u.inputTokens + u.outputTokens + u.reasoningTokens,
    inputTokens: u.inputTokens,
    outputTokens: u.outputTokens,
    cacheReadTokens: u.cacheReadTokens,
    cacheWriteTokens: u.cacheWriteTokens,
    reasoningTokens: u.reasoningTokens,
    pacerWaitMs: p.pacerWaitMs,
    turns: p.turns,
    ...(p.detail ? { detail: p.detail } : {}),
    updatedAt: p.updatedAt,
  };
}

export class LiveState {
  readonly runs = new Map<string, RunProgress>();
  /** run -> cellId -> cell. Runs are keyed by the name inside the value, so no key decoding is needed. */
  readonly cells = new Map<string, Map<string, LiveCell>>();
  readonly actors = new Map<string, Heartbeat>();
  /** pool.<run>.<pool> keys: kept raw, their shape belongs to the dispatcher. */
  readonly poolKeys = new Map<string, { run: string; value: Record<string, unknown> }>();
  readonly pacer = new Map<string, PacerPool>();
  /** key -> (run, cellId) so a deleted cell key can be found again. */
  private readonly cellKeys = new Map<string, { run: string; cellId: string }>();

  /** Fold one `progress` bucket entry. Returns what changed, or null when nothing a viewer shows did. */
  applyProgress(e: Pick<KvEntry, "key" | "value" | "operation">): Change | null {
    const kind = e.key.slice(0, e.key.indexOf("."));
    const deleted = e.operation !== "PUT";
    if (kind === "cell") {
      if (deleted) {
        const at = this.cellKeys.get(e.key);
        if (!at) return null;
        this.cellKeys.delete(e.key);
        this.cells.get(at.run)?.delete(at.cellId);
        return { kind: "cellDeleted", run: at.run, cellId: at.cellId };
      }
      const r = CellProgressSchema.safeParse(json(e.value));
      if (!r.success) return null;
      const cell = liveCell(r.data);
      let m = this.cells.get(r.data.run);
      if (!m) {
        m = new Map();
        this.cells.set(r.data.run, m);
      }
      m.set(cell.cellId, cell);
      this.cellKeys.set(e.key, { run: r.data.run, cellId: cell.cellId });
      return { kind: "cell", run: r.data.run, cell };
    }
    if (kind === "run") {
      const r = deleted ? null : RunProgressSchema.safeParse(json(e.value));
      if (!r?.success) return null;
      this.runs.set(r.data.run, r.data);
      return { kind: "run", run: r.data.run };
    }
    if (kind === "actor") {
      if (deleted) return this.actors.delete(e.key) ? { kind: "actor" } : null;
      const r = HeartbeatSchema.safeParse(json(e.value));
      if (!r.success) return null;
      this.actors.set(e.key, r.data);
      return { kind: "actor" };
    }
    if (kind === "pool") {
      const v = deleted ? undefined : json(e.value);
      const run = typeof (v as { run?: unknown })?.run === "string" ? (v as { run: string }).run : null;
      if (!run || typeof v !== "object") return null;
      this.poolKeys.set(e.key, { run, value: v as Record<string, unknown> });
      return { kind: "pool", run };
    }
    return null;
  }

  /** Fold one `pacer` bucket entry (`pool.<pool>`: the owner record). */
  applyPacer(e: Pick<KvEntry, "key" | "value" | "operation">): Change | null {
    const dot = e.key.indexOf(".");
    if (`${e.key.slice(0, dot)}.>` !== LiveKeys.pacerPools) return null;
    const pool = decodeToken(e.key.slice(dot + 1));
    if (e.operation !== "PUT") return this.pacer.delete(pool) ? { kind: "pacer" } : null;
    const v = json(e.value) as Partial<{
      owner: string | null;
      heartbeatWallMs: number;
      checkpoint: { limits?: Record<string, number>; pausedUntilWallMs?: number; overloadStreak?: number };
      stats: { settledCalls?: number; outputTokensP95?: number };
    }>;
    if (!v || typeof v !== "object") return null;
    this.pacer.set(pool, {
      pool,
      owner: v.owner ?? null,
      heartbeatWallMs: Number(v.heartbeatWallMs ?? 0),
      limits: v.checkpoint?.limits ?? {},
      pausedUntilWallMs: Number(v.checkpoint?.pausedUntilWallMs ?? 0),
      overloadStreak: Number(v.checkpoint?.overloadStreak ?? 0),
      settledCalls: Number(v.stats?.settledCalls ?? 0),
      outputTokensP95: Number(v.stats?.outputTokensP95 ?? 0),
    });
    return { kind: "pacer" };
  }

  runNames(): string[] {
    return [...this.runs.values()]
      .sort((a, b) => b.updatedAt.localeCompare(a.updatedAt) || a.run.localeCompare(b.run))
      .map((r) => r.run);
  }

  /** Fleet size per pool: the run key's `pools`, overridden by newer `pool.<run>.<pool>` keys when present. */
  fleet(run: string): Record<string, number> {
    const out: Record<string, number> = {};
    for (const [pool, v] of Object.entries(this.runs.get(run)?.pools ?? {})) out[pool] = v.fleetSize;
    for (const p of this.poolKeys.values()) {
      if (p.run !== run) continue;
      const pool = typeof p.value.pool === "string" ? p.value.pool : undefined;
      const size = p.value.fleetSize;
      if (pool && typeof size === "number") out[pool] = size;
    }
    return out;
  }
}

/** Figures for one run: the run key's counters and money, token and pacer sums over its cell keys, the fleet. */
export interface RunSummary {
  run: string;
  phase: RunProgress["phase"];
  message: string;
  totalCells: number;
  completed: number;
  failed: number;
  skipped: number;
  running: number;
  pending: number;
  totalCostNanoUsd: number;
  billableCostNanoUsd: number;
  budgetNanoUsd: number | null;
  tokens: { input: number; output: number; cacheRead: number; cacheWrite: number; reasoning: number };
  pacerWaitMs: number;
  cellsWithKeys: number;
  fleet: Record<string, number>;
  /** forged messages the plane refused for this run (security events) */
  securityEvents: number;
  /** cells the environment ended (not the model's failures; out of the resolved rate) */
  infraFailures?: number;
  updatedAt: string;
}

export function summarize(state: LiveState, run: string): RunSummary | null {
  const p = state.runs.get(run);
  if (!p) return null;
  const tokens = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, reasoning: 0 };
  let pacerWaitMs = 0;
  const cells = state.cells.get(run);
  for (const c of cells?.values() ?? []) {
    tokens.input += c.inputTokens;
    tokens.output += c.outputTokens;
    tokens.cacheRead += c.cacheReadTokens;
    tokens.cacheWrite += c.cacheWriteTokens;
    tokens.reasoning += c.reasoningTokens;
    pacerWaitMs += c.pacerWaitMs;
  }
  return {
    run,
    phase: p.phase,
    message: p.message,
    totalCells: p.totalCells,
    completed: p.completed,
    failed: p.failed,
    skipped: p.skipped,
    running: p.running,
    pending: p.pending,
    totalCostNanoUsd: p.totalCostNanoUsd,
    billableCostNanoUsd: p.billableCostNanoUsd,
    budgetNanoUsd: p.budgetNanoUsd,
    tokens,
    pacerWaitMs,
    cellsWithKeys: cells?.size ?? 0,
    fleet: state.fleet(run),
    securityEvents: p.securityEvents ?? 0,
    infraFailures: p.infraFailures ?? 0,
    updatedAt: p.updatedAt,
  };
}

/** A run is over when its phase says so: nothing more will change. */
export function isTerminal(phase: RunProgress["phase"]): boolean {
  return phase === "finished" || phase === "cancelled" || phase === "rejected";
}

/**
 * Cells finished per second from samples (time, cells done), over the last `windowMs`; ETA for the rest.
 * Pure: the caller records samples as the run key changes.
 */
export function eta(
  samples: readonly { atMs: number; done: number }[],
  remaining: number,
  windowMs = 120_000,
  minSpanMs = 5_000,
): { rate: number | null; etaMs: number | null } {
  const last = samples[samples.length - 1];
  if (!last) return { rate: null, etaMs: null };
  const first = samples.find((s) => s.atMs >= last.atMs - windowMs) ?? last;
  const dt = last.atMs - first.atMs;
  // Two samples milliseconds apart give a meaningless rate: wait for a few seconds of history.
  const rate = dt >= minSpanMs ? ((last.done - first.done) * 1000) / dt : null;
  if (remaining === 0) return { rate, etaMs: 0 };
  return { rate, etaMs: rate && rate > 0 ? (remaining / rate) * 1000 : null };
}

/**
 * Read a bucket's current values once through a watcher: entries up to the end of the initial replay (the last
 * replayed entry is the first marked isUpdate), or until the stream goes quiet (an empty replay sends nothing).
 */
export async function snapshotBucket(
  kv: KV,
  key: string,
  onEntry: (e: KvEntry) => void,
  opts: { firstMs?: number; idleMs?: number } = {},
): Promise<void> {
  const it = await kv.watch({ key });
  let timer: NodeJS.Timeout | undefined;
  const arm = (ms: number) => {
    clearTimeout(timer);
    timer = setTimeout(() => it.stop(), ms);
  };
  arm(opts.firstMs ?? 1_000);
  try {
    for await (const e of it) {
      onEntry(e);
      if (e.isUpdate) break;
      arm(opts.idleMs ?? 500);
    }
  } finally {
    clearTimeout(timer);
    it.stop();
  }
}
