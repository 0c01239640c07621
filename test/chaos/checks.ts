/**
 * The invariants a chaos scenario is judged by, read from PostgreSQL, KV and the scripted provider once the run is
 * over: every run finished; one run_state row per cell and exactly one attempt row per cell that ran; no ledger row
 * lost or doubled (the ledger equals the provider's bill per key, exactly: a call no shim could meter settles from
 * the gateway's spend log; the one exception is a call a SIGKILLed gateway replica held, which nobody metered); the budget passed by no more than the reservations in
 * flight; the gateway in every call's path; the ledger-vs-gateway reconciliation flagging nothing unexplained.
 */
import type { BudgetState } from "../../actors/dispatcher/budget.js";
import type { Plane } from "../../plane/connect.js";
import { usdToNano } from "../../protocol/money.js";
import { ProgressKeys, StateKeys } from "../../protocol/subjects.js";
import { Consumers, Streams } from "../../protocol/topology.js";
import type { ScriptedProvider } from "../../scripted-provider/index.js";
import type { Db } from "../../store/db.js";

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

/** A window in which some part of the plane was down (epoch ms). */
export interface Incident {
  kind: "gateway" | "postgres" | "dispatcher" | "nats-server" | "task" | "other";
  fromMs: number;
  toMs: number;
}

/** A task SIGKILLed mid-call (local backend). */
export interface KilledAttempt {
  cellId: string;
  attempt: number;
}

export interface ChecksInput {
  mode: string;
  db: Db;
  client: Plane;
  provider: ScriptedProvider;
  upstreamKey: string;
  run: string;
  totalCells: number;
  finished: boolean;
  parallel: number;
  budgetUsd: number;
  maxCostUsd: number;
  /** which attempt a provider request belongs to */
  attribute: (body: unknown) => { cellId: string; attempt: number } | undefined;
  incidents: readonly Incident[];
  killedTasks: readonly KilledAttempt[];
  /** connections the balancer handed to each gateway replica */
  balanced: Record<number, number>;
}

/** How long before a gateway or PostgreSQL crash a call may have started and still been caught in it. */
const IN_FLIGHT_MS = 30_000;

const key = (cell: string, attempt: number) => `${cell}#${attempt}`;

export async function runChecks(
  c: ChecksInput,
): Promise<{ checks: Check[]; figures: Record<string, unknown> }> {
  const { db, run, totalCells } = c;
  const checks: Check[] = [];
  const check = (name: string, ok: boolean, detail: string) =>
    checks.push({ name: `[${c.mode}] ${name}`, ok, detail });

  // 1. every run finished (PostgreSQL and the progress key)
  const prog = await c.client.kv.progress.get(ProgressKeys.run(run)).catch(() => null);
  const phase = prog && prog.length > 0 ? (prog.json<{ phase?: string }>().phase ?? "?") : "none";
  check("run finished (every cell final in run_state)", c.finished, `progress key phase: ${phase}`);
  // Why not: grades still awaited, or the ledger consumer's ack floor behind the stream's end.
  const pendingGrades = await scalar(
    db,
    "SELECT count(*)::text AS v FROM run_results WHERE run_name = $1 AND grade_status = 'PENDING'",
    [run],
  ).catch(() => -1);
  const ledgerInfo = await c.client.jsm.streams.info(Streams.ledger.name).catch(() => null);
  const lc = Consumers.resultsWriterLedger;
  const ledgerCons = await c.client.jsm.consumers.info(lc.stream, lc.durable).catch(() => null);
  const gradeCons = await c.client.jsm.consumers
    .info(Consumers.graderSupervisor.stream, Consumers.graderSupervisor.durable)
    .catch(() => null);
  check(
    "progress key says finished",
    phase === "finished",
    `${phase}; ${pendingGrades} attempts grade_status PENDING; ledger ack floor ${ledgerCons?.ack_floor.stream_seq ?? "?"} / stream last ${ledgerInfo?.state.last_seq ?? "?"}; grade jobs pending ${gradeCons?.num_pending ?? "?"}, unacked ${gradeCons?.num_ack_pending ?? "?"}, redelivered ${gradeCons?.num_redelivered ?? "?"}`,
  );

  // 2. one run_state row per cell; one attempt row per cell that ran
  const stateRows = await scalar(db, "SELECT count(*)::text AS v FROM run_state WHERE run_name = $1", [run]);
  const distinctState = await scalar(
    db,
    "SELECT count(DISTINCT cell_id)::text AS v FROM run_state WHERE run_name = $1",
    [run],
  );
  check(
    "one run_state row per cell",
    stateRows === totalCells && distinctState === totalCells,
    `${stateRows} rows, ${distinctState} cells, ${totalCells} expected`,
  );
  const ran = await scalar(
    db,
    "SELECT count(*)::text AS v FROM run_state WHERE run_name = $1 AND status <> 'skipped'",
    [run],
  );
  const results = await scalar(db, "SELECT count(*)::text AS v FROM run_results WHERE run_name = $1", [run]);
  const orphanResults = await scalar(
    db,
    `SELECT count(*)::text AS v FROM run_results r LEFT JOIN run_state s USING (run_name, cell_id)
      WHERE r.run_name = $1 AND s.cell_id IS NULL`,
    [run],
  );
  const missingResults = await scalar(
    db,
    `SELECT count(*)::text AS v FROM run_state s LEFT JOIN run_results r USING (run_name, cell_id)
      WHERE s.run_name = $1 AND s.status <> 'skipped' AND r.cell_id IS NULL`,
    [run],
  );
  check(
    "exactly one attempt row per cell that ran",
    missingResults === 0 && orphanResults === 0 && results >= ran,
    `${results} run_results rows; ${ran} cells not skipped; ${missingResults} missing; ${orphanResults} without a cell`,
  );
  const finals = await db.query<{ cell_id: string; attempt: number; status: string | null }>(
    "SELECT cell_id, attempt, status FROM run_results WHERE run_name = $1",
    [run],
  );
  const relaunchedCells = finals.rows.filter((r) => Number(r.attempt) > 0).length;

  // 3. the gateway tier is in every call's path
  const bill = c.provider.bill();
  const otherKeys = Object.keys(bill.byKey).filter((k) => k !== c.upstreamKey);
  const line = bill.byKey[c.upstreamKey];
  const billCalls = line?.calls ?? 0;
  const billCost = BigInt(line?.costNanoUsd ?? 0);
  const gw = await db.query<{ status: string; n: string; cost: string }>(
    `SELECT COALESCE(status, '?') AS status, count(*)::text AS n, COALESCE(sum(cost_nano_usd), 0)::text AS cost
       FROM gateway_spend_log WHERE run_name = $1 GROUP BY status ORDER BY status`,
    [run],
  );
  const gwRows = gw.rows.reduce((a, r) => a + Number(r.n), 0);
  const failedOver = await scalar(
    db,
    `SELECT count(*)::text AS v FROM ledger_calls WHERE run_name = $1 AND status = 'error' AND http_status IS NULL`,
    [run],
  ).catch(() => -1);
  const replicas = Object.values(c.balanced).filter((n) => n > 0).length;
  check(
    "every call went through the gateway tier (two replicas, the run's key)",
    otherKeys.length === 0 && gwRows >= billCalls && replicas >= 2,
    `provider keys other than the gateway's: ${otherKeys.length}; gateway spend-log rows ${gwRows} ≥ billed calls ${billCalls} (${gw.rows.map((r) => `${r.status} ${r.n}`).join(", ")}); connections per replica ${JSON.stringify(c.balanced)}; shim tries that found no gateway answering (retried) ${failedOver}`,
  );

  // 4. the ledger against the provider's bill, attempt by attempt
  type Tally = { calls: number; cost: bigint };
  const billed = new Map<string, Tally>();
  let unattributed = 0;
  for (const call of c.provider.calls()) {
    if (!call.billed || call.costNanoUsd <= 0) continue;
    const who = c.attribute(call.body);
    if (!who) {
      unattributed++;
      continue;
    }
    const t = billed.get(key(who.cellId, who.attempt)) ?? { calls: 0, cost: 0n };
    t.calls++;
    t.cost += BigInt(call.costNanoUsd);
    billed.set(key(who.cellId, who.attempt), t);
  }
  // Per attempt: the ledger's exact rows (metered, or `reported`: the only guessed call of its model trued up to the
  // provider's usage report), and the rest: calls whose figure is a guess (a SIGKILLed gateway replica held them:
  // `orphaned` at their reservation until trued up) or a share (`apportioned`: several guessed calls split what the
  // report holds beyond the metered ones — the run's total exact, the split between them an estimate).
  const GUESSES = "('orphaned', 'lost', 'client_closed', 'apportioned')";
  const perAttempt = async (where: string): Promise<Map<string, Tally>> => {
    const rows = await db.query<{ cell_id: string; attempt: number; n: string; cost: string }>(
      `SELECT cell_id, attempt, count(*)::text AS n, sum(cost_nano_usd)::text AS cost
         FROM ledger_calls WHERE run_name = $1 AND cost_nano_usd > 0 AND ${where} GROUP BY cell_id, attempt`,
      [run],
    );
    return new Map(
      rows.rows.map((r) => [key(r.cell_id, Number(r.attempt)), { calls: Number(r.n), cost: BigInt(r.cost) }]),
    );
  };
  const sum = (m: Map<string, Tally>) =>
    [...m.values()].reduce((a, t) => ({ calls: a.calls + t.calls, cost: a.cost + t.cost }), {
      calls: 0,
      cost: 0n,
    });
  const ledger = await perAttempt(`status NOT IN ${GUESSES}`);
  const guesses = await perAttempt(`status IN ${GUESSES}`);
  const { calls: ledgerCalls, cost: ledgerCost } = sum(ledger);
  const { calls: guessCalls, cost: guessCost } = sum(guesses);
  const untrued = await db.query<{ status: string; n: string }>(
    `SELECT status, count(*)::text AS n FROM ledger_calls
      WHERE run_name = $1 AND status IN ('orphaned', 'lost', 'client_closed') GROUP BY status`,
    [run],
  );
  const untruedCalls = untrued.rows.reduce((a, r) => a + Number(r.n), 0);
  // A call a killed replica held that the ledger does not have yet: its row still pending (the replica not yet
  // known dead when the run ended).
  const stranded = await strandedGatewayRows(db, run, c.incidents);
  const strandedPending = [...stranded.values()].reduce((a, n) => a + n, 0);
  let doubled = 0;
  const doubledAt: string[] = [];
  let lostUnexplained = 0;
  const lostCells: string[] = [];
  const guessedBilled = { calls: 0, cost: 0n };
  for (const k of new Set([...billed.keys(), ...ledger.keys(), ...guesses.keys()])) {
    const b = billed.get(k) ?? { calls: 0, cost: 0n };
    const l = ledger.get(k) ?? { calls: 0, cost: 0n };
    const o = guesses.get(k) ?? { calls: 0, cost: 0n };
    if (l.cost > b.cost || l.calls > b.calls) {
      doubled += Math.max(1, l.calls - b.calls);
      doubledAt.push(`${k} ledger ${l.calls}/${l.cost} bill ${b.calls}/${b.cost}`);
    }
    if (b.cost <= l.cost) continue;
    const [cell = ""] = k.split("#");
    const n = b.calls - l.calls;
    const strandedHere = stranded.get(cell) ?? 0;
    if (n > 0 && o.calls + strandedHere >= n) {
      guessedBilled.calls += n;
      guessedBilled.cost += b.cost - l.cost;
      stranded.set(cell, strandedHere - Math.max(0, n - o.calls));
    } else {
      lostUnexplained += Math.max(1, n);
      lostCells.push(`${k} ledger ${l.calls}/${l.cost} (+ ${o.calls} guessed) bill ${b.calls}/${b.cost}`);
    }
  }
  const settled = await db.query<{ status: string; n: string }>(
    "SELECT status, count(*)::text AS n FROM ledger_calls WHERE run_name = $1 AND source = 'gateway' GROUP BY status",
    [run],
  );
  const fromGateway = settled.rows.map((r) => `${r.status} ${r.n}`).join(", ") || "none";
  check(
    "no ledger row doubled (per attempt: ledger ≤ bill)",
    doubled === 0 && ledgerCalls <= billCalls,
    `ledger ${ledgerCalls} exact rows / bill ${billCalls} calls; ${doubled} extra rows${doubledAt.length ? ` (${doubledAt.slice(0, 5).join("; ")})` : ""}`,
  );
  check(
    "no ledger row lost (a killed task's calls settle from the gateway)",
    lostUnexplained === 0 && unattributed === 0,
    `${lostUnexplained} lost${lostCells.length ? ` (${lostCells.slice(0, 5).join("; ")})` : ""}; ${unattributed} billed calls not attributable to an attempt; settled from the gateway's spend log: ${fromGateway}; billed calls whose answer reached nobody ${guessedBilled.calls}`,
  );
  // Exact per key: every forwarded call in the ledger at what the provider billed, a SIGKILLed gateway replica's
  // included (trued up to the provider's usage report once the run was over).
  const total = ledgerCost + guessCost;
  const exact = total === billCost && untruedCalls === 0 && strandedPending === 0;
  check(
    "ledger total = provider bill (per key, exactly)",
    exact && lostUnexplained === 0 && doubled === 0,
    `key ${c.upstreamKey}: ledger ${total} nano-USD / bill ${billCost} nano-USD${exact ? "" : ` (Δ ${billCost - total})`}; ${guessedBilled.calls} billed calls whose answer reached nobody (${guessedBilled.cost} nano-USD), ${guessCalls} ledger rows apportioned or guessed (${guessCost} nano-USD)${untruedCalls > 0 ? `, ${untrued.rows.map((r) => `${r.n} ${r.status}`).join(", ")} still at their reservation (not trued up)` : ""}${strandedPending > 0 ? `, ${strandedPending} still pending` : ""}; other keys billed: ${otherKeys.length}`,
  );

  // 5. budget: billable spend may pass the cap by at most the reservations in flight
  const budgetEntry = await c.client.kv.budgets.get(StateKeys.budget(run)).catch(() => null);
  const budget = budgetEntry && budgetEntry.length > 0 ? budgetEntry.json<BudgetState>() : null;
  const capNano = usdToNano(c.budgetUsd);
  const inFlight = BigInt(c.parallel + relaunchedCells) * usdToNano(c.maxCostUsd);
  const over = billCost - capNano;
  check(
    "budget exceeded by no more than in-flight reservations",
    over <= inFlight,
    `spent ${billCost} nano-USD, cap ${capNano}, over by ${over > 0n ? over : 0n} ≤ allowance ${inFlight} ((parallel ${c.parallel} + relaunched ${relaunchedCells}) × max_cost_usd)`,
  );
  check(
    "budget state settled (no open reservation)",
    budget !== null && Object.keys(budget.open ?? {}).length === 0,
    budget
      ? `remaining ${String(budget.remainingNano)} nano-USD, open ${Object.keys(budget.open ?? {}).length}`
      : "no budget key",
  );

  // 6. a task killed mid-call still has its attempt row (retried, or classified)
  if (c.killedTasks.length > 0) {
    const landed = c.killedTasks.map((k) => {
      const row = finals.rows.find((r) => r.cell_id === k.cellId);
      return { k, row, ok: row !== undefined && Number(row.attempt) >= k.attempt };
    });
    check(
      "a task SIGKILLed mid-call: its cell's attempt lands as a row",
      landed.every((l) => l.ok),
      landed
        .map(
          (l) =>
            `${l.k.cellId} attempt ${l.k.attempt} killed → ${l.row ? `row attempt ${l.row.attempt} ${l.row.status}` : "no row"}`,
        )
        .join("; "),
    );
  }

  // 7. the results-writer's reconciliation (ledger vs the gateway's spend log, per cell): after the gateway's
  // settlement only a row left pending (a replica killed mid-call, PostgreSQL down as it settled) can differ
  const rec = await reconciliation(db, run, c.incidents);
  check(
    "run reconciled with the gateway: every cell, nothing flagged unexplained",
    rec.cells === results && rec.unexplained.length === 0,
    `${rec.cells} cells reconciled of ${results}; ${rec.flagged} flagged: ${rec.byReason.pendingGateway} with a call a killed gateway replica never settled, ${rec.byReason.pendingPostgres} settled while PostgreSQL was down (row left pending); unexplained ${rec.unexplained.length}${rec.unexplained.length ? ` (${rec.unexplained.slice(0, 5).join("; ")})` : ""}`,
  );

  return {
    checks,
    figures: {
      run,
      cells: totalCells,
      ledgerCalls,
      billCalls,
      ledgerCostNanoUsd: String(ledgerCost),
      billCostNanoUsd: String(billCost),
      relaunchedCells,
      answerReachedNobody: { calls: guessedBilled.calls, cost: String(guessedBilled.cost) },
      gatewayRows: Object.fromEntries(gw.rows.map((r) => [r.status, Number(r.n)])),
      shimTriesRetriedOnDeadGateway: failedOver,
      reconcileFlagged: rec.flagged,
    },
  };
}

/** Per cell, gateway rows never settled that a gateway kill (not a PostgreSQL outage) explains. */
async function strandedGatewayRows(
  db: Db,
  run: string,
  incidents: readonly Incident[],
): Promise<Map<string, number>> {
  const rows = await db.query<{ cell_id: string; at: string }>(
    `SELECT cell_id, (extract(epoch FROM created_at) * 1000)::bigint::text AS at FROM gateway_spend_log
      WHERE run_name = $1 AND status = 'pending' AND cell_id IS NOT NULL`,
    [run],
  );
  const out = new Map<string, number>();
  for (const r of rows.rows)
    if (within(Number(r.at), incidents, "gateway")) out.set(r.cell_id, (out.get(r.cell_id) ?? 0) + 1);
  return out;
}

function within(atMs: number, incidents: readonly Incident[], kind: Incident["kind"]): boolean {
  return incidents.some((i) => i.kind === kind && atMs >= i.fromMs - IN_FLIGHT_MS && atMs <= i.toMs + 1_000);
}

async function reconciliation(
  db: Db,
  run: string,
  incidents: readonly Incident[],
): Promise<{
  cells: number;
  flagged: number;
  byReason: { pendingGateway: number; pendingPostgres: number };
  unexplained: string[];
}> {
  const rows = await db.query<{ cell_id: string; ledger: string; gateway: string; flagged: boolean }>(
    `SELECT cell_id, ledger_nano_usd::text AS ledger, gateway_nano_usd::text AS gateway, flagged
       FROM reconciliation_results WHERE run_name = $1`,
    [run],
  );
  const pending = await db.query<{ cell_id: string; at: string }>(
    `SELECT cell_id, (extract(epoch FROM created_at) * 1000)::bigint::text AS at FROM gateway_spend_log
      WHERE run_name = $1 AND status = 'pending' AND cell_id IS NOT NULL`,
    [run],
  );
  const pendingAt = new Map<string, number[]>();
  for (const p of pending.rows) pendingAt.set(p.cell_id, [...(pendingAt.get(p.cell_id) ?? []), Number(p.at)]);
  const byReason = { pendingGateway: 0, pendingPostgres: 0 };
  const unexplained: string[] = [];
  let flagged = 0;
  for (const r of rows.rows) {
    if (!r.flagged) continue;
    flagged++;
    const at = pendingAt.get(r.cell_id) ?? [];
    if (
      at.length > 0 &&
      at.every((t) => within(t, incidents, "gateway") || within(t, incidents, "postgres"))
    ) {
      if (at.some((t) => within(t, incidents, "gateway"))) byReason.pendingGateway++;
      else byReason.pendingPostgres++;
    } else
      unexplained.push(
        `${r.cell_id}: ledger ${r.ledger} vs gateway ${r.gateway}${at.length ? `, ${at.length} pending` : ""}`,
      );
  }
  return { cells: rows.rows.length, flagged, byReason, unexplained };
}

async function scalar(db: Db, sql: string, params: unknown[]): Promise<number> {
  const r = await db.query<{ v: string }>(sql, params);
  return Number(r.rows[0]?.v ?? 0);
}
