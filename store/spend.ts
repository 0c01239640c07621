import { emptyUsage, type Usage } from "../protocol/messages.js";
import type { Db } from "./db.js";
import { saveReconciliation } from "./reconcile.js";

/**
 * The gateway's own spend log: one row per upstream call in gateway_spend_log, independent of the shim's ledger.
 * A row is written `pending` with the call's worst-case cost BEFORE the call is forwarded and settled to the
 * metered cost after. So a replica that dies mid-call leaves a pending row holding the reservation — the call is
 * never missing from the log, and it is over-counted (safe), never under-counted — and the run's spend cap,
 * checked against the sum of all rows under a per-run lock, holds across any number of replicas.
 */

/**
 * `orphaned`: pending when its replica stopped heartbeating (killed mid-call); like `lost`, its reservation — the
 * call's worst case — stands as its cost, since what the provider billed for it reached nobody.
 */
export type SpendStatus =
  | "pending"
  | "ok"
  | "error"
  | "cut"
  | "client_closed"
  | "lost"
  | "orphaned"
  | "reported"
  | "apportioned";

export interface SpendRow {
  requestId: string;
  run: string;
  cellId: string | null;
  traceId: string | null;
  alias: string;
  model: string;
  /** the shim's id of this try (x-evalfleet-call), matching the ledger row it wrote */
  callId: string | null;
  /** the key that made the call */
  keyHash: string | null;
  attempt: number | null;
  /** a budget-exempt cell's call: never counted against the run's cap */
  exempt: boolean;
  /** the gateway replica holding the call (heartbeatReplica); a row of one that stops heartbeating is an orphan */
  replicaId?: string | null;
}

/** The token figures a settled row records (a provider's TokenUsage has them). */
export type SpendTokens = Pick<
  Usage,
  "inputTokens" | "outputTokens" | "cacheReadTokens" | "cacheWriteTokens" | "reasoningTokens"
>;

/** The caps a call is checked against: the run's (budget_usd) and its key's own (an attempt's max_cost_usd). */
export interface SpendCaps {
  runCapNanoUsd: number | undefined;
  keyCapNanoUsd: number | null;
}

/**
 * What a call wants to reserve: its worst case, and, when that does not fit, the reservation of the same call with
 * its output cap lowered to fit what is left (null: not even its input fits).
 */
export interface SpendWant {
  worstNanoUsd: number;
  fit?: (leftNanoUsd: number) => number | null;
}

export type ReserveOutcome =
  | { ok: true; reserveNanoUsd: number }
  | {
      ok: false;
      cap: "run" | "key";
      spentNanoUsd: number;
      capNanoUsd: number;
      /** it would fit once the calls in flight settle (their reservations are what is in the way): try again */
      wait: boolean;
    };

/** Sum of the run's logged spend (pending reservations included), nano-USD. */
export async function runSpendNanoUsd(db: Db, run: string): Promise<number> {
  const r = await db.query<{ s: number }>(
    "SELECT COALESCE(SUM(cost_nano_usd), 0)::bigint AS s FROM gateway_spend_log WHERE run_name = $1",
    [run],
  );
  return Number(r.rows[0]?.s ?? 0);
}

/** The part of the run's logged spend its cap counts: every call of a cell that is not budget-exempt. */
export async function runBillableSpendNanoUsd(db: Db, run: string): Promise<number> {
  const r = await db.query<{ s: number }>(
    "SELECT COALESCE(SUM(cost_nano_usd), 0)::bigint AS s FROM gateway_spend_log WHERE run_name = $1 AND NOT exempt",
    [run],
  );
  return Number(r.rows[0]?.s ?? 0);
}

/** Spend as settled and as reserved by calls still in flight. */
interface Spent {
  settled: number;
  pending: number;
}

async function spentWhere(db: Db, where: string, param: string): Promise<Spent> {
  const r = await db.query<{ settled: string; pending: string }>(
    `SELECT COALESCE(SUM(cost_nano_usd) FILTER (WHERE status IS DISTINCT FROM 'pending'), 0)::text AS settled,
            COALESCE(SUM(cost_nano_usd) FILTER (WHERE status = 'pending'), 0)::text AS pending
       FROM gateway_spend_log WHERE ${where}`,
    [param],
  );
  return { settled: Number(r.rows[0]?.settled ?? 0), pending: Number(r.rows[0]?.pending ?? 0) };
}

/**
 * Log the call as pending with its reservation, checked against the run's cap (its non-exempt spend: a
 * subscription cell neither uses up nor is stopped by the platform budget) and its key's own cap. A call whose
 * worst case does not fit is clamped to what is left when it can be, else refused. The checks and the insert share
 * one transaction under a per-run advisory lock (PGlite is a single session, already serial), so two replicas cannot
 * both squeeze under a cap.
 */
export async function reserveSpend(
  db: Db,
  row: SpendRow,
  want: SpendWant,
  caps: SpendCaps,
): Promise<ReserveOutcome> {
  const insert = (tx: Db, reserveNanoUsd: number) =>
    tx.query(
      `INSERT INTO gateway_spend_log (request_id, run_name, cell_id, trace_id, alias, model, cost_nano_usd, status,
         call_id, key_hash, attempt, exempt, replica_id)
       VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9, $10, $11, $12)`,
      [
        row.requestId,
        row.run,
        row.cellId,
        row.traceId,
        row.alias,
        row.model,
        reserveNanoUsd,
        row.callId,
        row.keyHash,
        row.attempt,
        row.exempt,
        row.replicaId ?? null,
      ],
    );
  const runCapped = caps.runCapNanoUsd !== undefined && !row.exempt;
  const keyCapped = caps.keyCapNanoUsd !== null && row.keyHash !== null;
  if (!runCapped && !keyCapped) {
    await insert(db, want.worstNanoUsd);
    return { ok: true, reserveNanoUsd: want.worstNanoUsd };
  }
  return db.transaction(async (tx) => {
    if (tx.kind === "postgres")
      await tx.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`efgw:${row.run}`]);
    // Each cap: what is left after settled spend and the reservations of calls in flight.
    const limits: Array<{ cap: "run" | "key"; capNanoUsd: number; spent: Spent }> = [];
    if (runCapped)
      limits.push({
        cap: "run",
        capNanoUsd: caps.runCapNanoUsd as number,
        spent: await spentWhere(tx, "run_name = $1 AND NOT exempt", row.run),
      });
    if (keyCapped)
      limits.push({
        cap: "key",
        capNanoUsd: caps.keyCapNanoUsd as number,
        spent: await spentWhere(tx, "key_hash = $1", row.keyHash as string),
      });
    const leftOf = (l: (typeof limits)[number], withPending: boolean) =>
      l.capNanoUsd - l.spent.settled - (withPending ? l.spent.pending : 0);
    const binding = limits.reduce((a, b) => (leftOf(b, true) < leftOf(a, true) ? b : a));
    const reserveFor = (left: number): number | null => {
      if (want.worstNanoUsd <= left) return want.worstNanoUsd;
      const r = left > 0 && want.fit ? want.fit(left) : null;
      return r !== null && r <= left ? r : null;
    };
    const reserveNanoUsd = reserveFor(Math.min(...limits.map((l) => leftOf(l, true))));
    if (reserveNanoUsd === null) {
      // Calls in flight hold worst-case reservations, mostly handed back when they settle: while some are pending
      // and settled spend leaves room, this is a wait (retry), not the cap.
      const later = Math.min(...limits.map((l) => leftOf(l, false)));
      const wait = later > 0 && limits.some((l) => l.spent.pending > 0);
      return {
        ok: false,
        cap: binding.cap,
        spentNanoUsd: binding.spent.settled + binding.spent.pending,
        capNanoUsd: binding.capNanoUsd,
        wait,
      };
    }
    await insert(tx, reserveNanoUsd);
    return { ok: true, reserveNanoUsd } as const;
  });
}

/** Replace the reservation with the metered cost (0 for a call the provider refused before any output). */
export async function settleSpend(
  db: Db,
  requestId: string,
  status: SpendStatus,
  usage: SpendTokens | null,
  costNanoUsd: number,
  model?: string,
  priceVersion?: string,
): Promise<void> {
  const u = usage ?? emptyUsage();
  await db.query(
    `UPDATE gateway_spend_log SET status = $2, input_tokens = $3, output_tokens = $4, cache_read_tokens = $5,
       cache_write_tokens = $6, reasoning_tokens = $7, cost_nano_usd = $8, model = COALESCE($9, model),
       price_version = COALESCE($10, price_version)
     WHERE request_id = $1`,
    [
      requestId,
      status,
      u.inputTokens,
      u.outputTokens,
      u.cacheReadTokens,
      u.cacheWriteTokens,
      u.reasoningTokens,
      costNanoUsd,
      model ?? null,
      priceVersion ?? null,
    ],
  );
}

/** A gateway replica says it is up (at start, then every REPLICA_HEARTBEAT_MS). */
export const REPLICA_HEARTBEAT_MS = 10_000;
/** A replica silent this long is dead: its pending rows are orphans (a live one heartbeats 6 times in between). */
export const REPLICA_DEAD_MS = 60_000;

/** A replica is up: the first call registers it, every later one (each REPLICA_HEARTBEAT_MS) says it still is. */
export async function heartbeatReplica(db: Db, replicaId: string, host: string): Promise<void> {
  await db.query(
    `INSERT INTO gateway_replicas (replica_id, host) VALUES ($1, $2)
     ON CONFLICT (replica_id) DO UPDATE SET seen_at = now()`,
    [replicaId, host],
  );
}

/** A replica that drained: none of its calls is in flight any more. */
export async function stopReplica(db: Db, replicaId: string): Promise<void> {
  await db.query("UPDATE gateway_replicas SET seen_at = now(), stopped_at = now() WHERE replica_id = $1", [
    replicaId,
  ]);
}

/**
 * Settle the orphans: pending rows of a replica silent for deadMs (killed mid-call; a replica that drained settled
 * its own) become `orphaned` at their reservation, the call's worst case, so the ledger (settleFromGateway) and the
 * run's totals hold them — over the provider's bill by at most the reservation, never under it. A row left pending
 * by a live replica (PostgreSQL away when it settled) is not touched: its shim metered the call. Returns the runs
 * whose rows changed.
 */
export async function settleOrphans(db: Db, deadMs = REPLICA_DEAD_MS): Promise<string[]> {
  const r = await db.query<{ run_name: string | null }>(
    `UPDATE gateway_spend_log g SET status = 'orphaned'
       FROM gateway_replicas r
      WHERE g.status = 'pending' AND g.replica_id = r.replica_id AND r.stopped_at IS NULL
        AND r.seen_at < now() - make_interval(secs => $1::double precision / 1000)
      RETURNING g.run_name`,
    [deadMs],
  );
  // A replica long gone with nothing pending is history: its row goes (one row per replica start otherwise piles up).
  await db.query(
    `DELETE FROM gateway_replicas r WHERE r.seen_at < now() - interval '7 days'
        AND NOT EXISTS (SELECT 1 FROM gateway_spend_log g WHERE g.replica_id = r.replica_id AND g.status = 'pending')`,
  );
  return [...new Set(r.rows.map((x) => x.run_name).filter((x): x is string => x !== null))];
}

/** Statuses whose cost is a reservation, not what the provider billed: what a usage report can true up. */
const GUESSED = "('lost', 'client_closed', 'orphaned')";

/**
 * Runs a usage report could true up, with the aliases of their guessed calls: some call's cost is a reservation
 * (made in the last week: older ones are left as they are), none is still in flight (pending), and every cell is
 * final, so the run's window of calls is closed.
 */
export async function runsToTrueUp(db: Db): Promise<Map<string, string[]>> {
  const r = await db.query<{ run_name: string; alias: string | null }>(
    `SELECT DISTINCT g.run_name, g.alias FROM gateway_spend_log g
      WHERE g.status IN ${GUESSED} AND g.run_name IS NOT NULL AND g.created_at > now() - interval '7 days'
        AND NOT EXISTS (SELECT 1 FROM gateway_spend_log p WHERE p.run_name = g.run_name AND p.status = 'pending')
        AND NOT EXISTS (SELECT 1 FROM run_state s WHERE s.run_name = g.run_name AND s.status IN ('pending', 'running'))`,
  );
  const out = new Map<string, string[]>();
  for (const x of r.rows)
    out.set(x.run_name, [...(out.get(x.run_name) ?? []), ...(x.alias ? [x.alias] : [])]);
  return out;
}

/** What a run's spend log holds per alias and model: the metered sums, and each call whose cost is a guess. */
export interface TrueUpView {
  groups: Array<{
    alias: string;
    model: string;
    fromMs: number;
    toMs: number;
    metered: SpendTokens;
    guessed: Array<{
      requestId: string;
      reserveNanoUsd: number;
      status: SpendStatus;
      atMs: number;
      /** what its shim metered, when it did (the replica relayed the whole answer, then died before settling) */
      shim?: { usage: SpendTokens; costNanoUsd: number };
    }>;
  }>;
}

export async function trueUpView(db: Db, run: string): Promise<TrueUpView> {
  const sums = await db.query<{
    alias: string;
    model: string;
    from_ms: string;
    to_ms: string;
    input: string;
    output: string;
    cache_read: string;
    cache_write: string;
    reasoning: string;
  }>(
    `SELECT alias, model, (extract(epoch FROM min(created_at)) * 1000)::bigint::text AS from_ms,
            (extract(epoch FROM max(created_at)) * 1000)::bigint::text AS to_ms,
            (COALESCE(SUM(input_tokens) FILTER (WHERE status NOT IN ${GUESSED}), 0))::text AS input,
            (COALESCE(SUM(output_tokens) FILTER (WHERE status NOT IN ${GUESSED}), 0))::text AS output,
            (COALESCE(SUM(cache_read_tokens) FILTER (WHERE status NOT IN ${GUESSED}), 0))::text AS cache_read,
            (COALESCE(SUM(cache_write_tokens) FILTER (WHERE status NOT IN ${GUESSED}), 0))::text AS cache_write,
            (COALESCE(SUM(reasoning_tokens) FILTER (WHERE status NOT IN ${GUESSED}), 0))::text AS reasoning
       FROM gateway_spend_log WHERE run_name = $1 AND alias IS NOT NULL AND model IS NOT NULL
      GROUP BY alias, model`,
    [run],
  );
  const guessed = await db.query<{
    request_id: string;
    alias: string;
    model: string;
    cost: string;
    status: string;
    at: string;
    l_input: string | null;
    l_output: string | null;
    l_read: string | null;
    l_write: string | null;
    l_reasoning: string | null;
    l_cost: string | null;
  }>(
    `SELECT g.request_id, g.alias, g.model, g.cost_nano_usd::text AS cost, g.status,
            (extract(epoch FROM g.created_at) * 1000)::bigint::text AS at,
            l.input_tokens::text AS l_input, l.output_tokens::text AS l_output, l.cache_read_tokens::text AS l_read,
            l.cache_write_tokens::text AS l_write, l.reasoning_tokens::text AS l_reasoning,
            l.cost_nano_usd::text AS l_cost
       FROM gateway_spend_log g
       LEFT JOIN ledger_calls l ON l.call_id = g.call_id AND l.source = 'shim' AND l.status = 'ok'
      WHERE g.run_name = $1 AND g.status IN ${GUESSED}`,
    [run],
  );
  return {
    groups: sums.rows.map((g) => ({
      alias: g.alias,
      model: g.model,
      fromMs: Number(g.from_ms),
      toMs: Number(g.to_ms),
      metered: {
        inputTokens: Number(g.input),
        outputTokens: Number(g.output),
        cacheReadTokens: Number(g.cache_read),
        cacheWriteTokens: Number(g.cache_write),
        reasoningTokens: Number(g.reasoning),
      },
      guessed: guessed.rows
        .filter((r) => r.alias === g.alias && r.model === g.model)
        .map((r) => ({
          requestId: r.request_id,
          reserveNanoUsd: Number(r.cost),
          status: r.status as SpendStatus,
          atMs: Number(r.at),
          ...(r.l_cost === null
            ? {}
            : {
                shim: {
                  usage: {
                    inputTokens: Number(r.l_input),
                    outputTokens: Number(r.l_output),
                    cacheReadTokens: Number(r.l_read),
                    cacheWriteTokens: Number(r.l_write),
                    reasoningTokens: Number(r.l_reasoning),
                  },
                  costNanoUsd: Number(r.l_cost),
                },
              }),
        })),
    })),
  };
}

/** The aliases other runs called in [fromMs, toMs): whether the window's usage is this run's alone. */
export async function otherAliasesIn(db: Db, run: string, fromMs: number, toMs: number): Promise<string[]> {
  const r = await db.query<{ alias: string }>(
    `SELECT DISTINCT alias FROM gateway_spend_log
      WHERE created_at >= to_timestamp($2::double precision / 1000) AND created_at < to_timestamp($3::double precision / 1000)
        AND run_name IS DISTINCT FROM $1 AND alias IS NOT NULL`,
    [run, fromMs, toMs],
  );
  return r.rows.map((x) => x.alias);
}

/** Set a guessed call's figures to what the usage report says it used. False if it was settled meanwhile. */
export async function trueUpSpend(
  db: Db,
  requestId: string,
  status: "reported" | "apportioned",
  usage: SpendTokens,
  costNanoUsd: number,
  priceVersion: string,
): Promise<boolean> {
  const r = await db.query(
    `UPDATE gateway_spend_log SET status = $2, input_tokens = $3, output_tokens = $4, cache_read_tokens = $5,
       cache_write_tokens = $6, reasoning_tokens = $7, cost_nano_usd = $8, price_version = $9
     WHERE request_id = $1 AND status IN ${GUESSED}`,
    [
      requestId,
      status,
      usage.inputTokens,
      usage.outputTokens,
      usage.cacheReadTokens,
      usage.cacheWriteTokens,
      usage.reasoningTokens,
      costNanoUsd,
      priceVersion,
    ],
  );
  return r.rowCount > 0;
}

/** Runs whose ledger still holds a call at its reservation that the gateway has trued up since. */
export async function runsWithTruedCalls(db: Db): Promise<string[]> {
  const r = await db.query<{ run_name: string }>(
    `SELECT DISTINCT g.run_name FROM gateway_spend_log g
       JOIN ledger_calls l ON l.call_id = COALESCE(g.call_id, 'gateway:' || g.request_id) AND l.run_name = g.run_name
      WHERE g.status IN ('reported', 'apportioned') AND l.status IS DISTINCT FROM g.status
        AND (l.source = 'gateway' OR l.cost_nano_usd <> g.cost_nano_usd)`,
  );
  return r.rows.map((x) => x.run_name);
}

export interface Reconciliation {
  ledgerNanoUsd: number;
  gatewayNanoUsd: number;
  harnessReportedNanoUsd: number | null;
  /** gateway − ledger */
  differenceNanoUsd: number;
  flagged: boolean;
  /** gateway rows of the cell still pending (a replica died mid-call): their cost is a reservation */
  pendingCalls: number;
}

/**
 * Reconcile one finished attempt's cell: the shim's ledger total against the gateway's own log (and the harness's
 * self-report where it printed one). Money is exact integers, so any difference beyond `toleranceNanoUsd`
 * (default 0) is flagged; the caller publishes the flag as a run event. Upserts reconciliation_results.
 */
export async function reconcileAttempt(
  db: Db,
  run: string,
  cell: string,
  ledgerNanoUsd: number,
  harnessReportedNanoUsd?: number,
  opts: { toleranceNanoUsd?: number } = {},
): Promise<Reconciliation> {
  const r = await db.query<{ s: number; pending: number }>(
    `SELECT COALESCE(SUM(cost_nano_usd), 0)::bigint AS s,
            COUNT(*) FILTER (WHERE status = 'pending')::bigint AS pending
     FROM gateway_spend_log WHERE run_name = $1 AND cell_id = $2`,
    [run, cell],
  );
  const gatewayNanoUsd = Number(r.rows[0]?.s ?? 0);
  const pendingCalls = Number(r.rows[0]?.pending ?? 0);
  const differenceNanoUsd = gatewayNanoUsd - ledgerNanoUsd;
  const flagged = Math.abs(differenceNanoUsd) > (opts.toleranceNanoUsd ?? 0) || pendingCalls > 0;
  await saveReconciliation(db, {
    run,
    cell,
    ledgerNanoUsd,
    gatewayNanoUsd,
    harnessReportedNanoUsd: harnessReportedNanoUsd ?? null,
    differenceNanoUsd,
    flagged,
  });
  return {
    ledgerNanoUsd,
    gatewayNanoUsd,
    harnessReportedNanoUsd: harnessReportedNanoUsd ?? null,
    differenceNanoUsd,
    flagged,
    pendingCalls,
  };
}
