/**
 * Truing the spend log up to the provider's own record. A call whose answer reached nobody — its gateway replica
 * killed holding it (`orphaned`), or cut on the gateway's side (`lost`, `client_closed`) — was settled at its
 * reservation, the worst case: never under the bill, but not the bill. Once such a run is over (every cell final, no
 * call in flight) and the provider's usage report covers its window, the gateway reads the report for the run's
 * upstream key and model, takes away what it metered itself, and gives the rest to those calls: all of it to the
 * only one (`reported`, exact), else split by their reservations (`apportioned`: the run's total exact, the split an
 * estimate). The results-writer carries the new figures into the ledger (settleFromGateway).
 *
 * Only when the window's usage is the run's alone: another run calling the same upstream key in it, a report that
 * holds less than was metered (not complete yet) or more than the guessed calls could have cost (someone else used
 * the key) leaves the reservations standing, and says why.
 */
import type { Logger } from "../lib/log.js";
import type { PriceTable } from "../providers/pricing.js";
import type { TokenUsage } from "../providers/types.js";
import { fetchUsageReport, type ReportedTokens, type UsageReportSource } from "../providers/usage-report.js";
import type { Db } from "../store/db.js";
import { otherAliasesIn, runsToTrueUp, type SpendTokens, trueUpSpend, trueUpView } from "../store/spend.js";

/** How long after its reservation a call reaches the provider, at most (the reservation is its last step). */
const ARRIVAL_MARGIN_MS = 5_000;

export interface TrueUpDeps {
  db: Db;
  log: Logger;
  /** the alias's upstream and its usage report, if it has one */
  sourceOf(alias: string): Promise<{ upstreamKey: string; report?: UsageReportSource } | undefined>;
  /** the run's price table (run-config prices over the pinned data) */
  pricesOf(run: string): Promise<PriceTable>;
  now?: () => number;
}

export type TrueUpOutcome =
  | { kind: "trued"; calls: number }
  | { kind: "waiting"; why: string }
  | { kind: "skipped"; why: string };

/**
 * True up every run that can be; returns what happened to each. `later` (kept by the caller between sweeps) holds
 * when a run that had to wait, or was skipped, is looked at again, so a run nothing can true up costs nothing.
 */
export async function trueUpRuns(
  d: TrueUpDeps,
  later: Map<string, number> = new Map(),
): Promise<Map<string, TrueUpOutcome[]>> {
  const now = (d.now ?? Date.now)();
  const out = new Map<string, TrueUpOutcome[]>();
  for (const [run, aliases] of await runsToTrueUp(d.db)) {
    if ((later.get(run) ?? 0) > now) continue;
    let reportable = false;
    for (const a of new Set(aliases)) if ((await d.sourceOf(a))?.report) reportable = true;
    const outcomes: TrueUpOutcome[] = reportable
      ? await trueUpRun(d, run)
      : [{ kind: "skipped", why: "no upstream of its guessed calls has a usage_report configured" }];
    out.set(run, outcomes);
    if (outcomes.some((o) => o.kind === "waiting")) later.set(run, now + 60_000);
    else if (outcomes.some((o) => o.kind === "skipped")) later.set(run, now + 30 * 60_000);
    else later.delete(run);
  }
  if (later.size > 10_000) later.clear();
  return out;
}

/** One outcome per upstream key with guessed calls. */
export async function trueUpRun(d: TrueUpDeps, run: string): Promise<TrueUpOutcome[]> {
  const now = (d.now ?? Date.now)();
  const view = await trueUpView(d.db, run);
  // The run's calls per upstream key: one usage report each.
  const bySource = new Map<string, { report?: UsageReportSource; groups: typeof view.groups }>();
  for (const g of view.groups) {
    const src = await d.sourceOf(g.alias);
    if (!src) continue;
    const entry = bySource.get(src.upstreamKey) ?? {
      ...(src.report ? { report: src.report } : {}),
      groups: [],
    };
    entry.groups.push(g);
    bySource.set(src.upstreamKey, entry);
  }
  const outcomes: TrueUpOutcome[] = [];
  for (const [upstreamKey, { report, groups }] of bySource) {
    const guessed = groups.flatMap((g) => g.guessed);
    if (guessed.length === 0) continue;
    if (!report) {
      outcomes.push({ kind: "skipped", why: "its upstream has no usage_report configured" });
      continue;
    }
    const fromMs = Math.min(...groups.map((g) => g.fromMs));
    // The report's window is whole minutes. A row's time is its reservation, just before the call left; the provider
    // buckets the call by when it arrived, so the window reaches a few seconds past the last reservation (a call
    // reserved at hh:mm:59.999 may be in the next minute's bucket). The run is over: none of its calls come later.
    const toMs = Math.max(...groups.map((g) => g.toMs)) + ARRIVAL_MARGIN_MS;
    if (now < Math.ceil(toMs / 60_000) * 60_000 + report.lagMs) {
      outcomes.push({ kind: "waiting", why: "the provider's report may not hold the run's last calls yet" });
      continue;
    }
    const floor = Math.floor(fromMs / 60_000) * 60_000;
    const ceil = Math.ceil(toMs / 60_000) * 60_000;
    const others = await otherAliasesIn(d.db, run, floor, ceil);
    let shared = false;
    for (const a of new Set(others)) if ((await d.sourceOf(a))?.upstreamKey === upstreamKey) shared = true;
    if (shared) {
      outcomes.push({ kind: "skipped", why: "another run used the same upstream key in the run's window" });
      continue;
    }
    let reported: Map<string, ReportedTokens>;
    try {
      reported = await fetchUsageReport(report, floor, ceil);
    } catch (err) {
      outcomes.push({ kind: "waiting", why: (err as Error).message });
      continue;
    }
    const prices = await d.pricesOf(run);
    let calls = 0;
    for (const g of groups) {
      if (g.guessed.length === 0) continue;
      const r = reported.get(g.model) ?? {
        uncachedInput: 0,
        cacheRead: 0,
        cacheWrite5m: 0,
        cacheWrite1h: 0,
        output: 0,
      };
      // What the report holds beyond the metered calls, by how it is priced (the spend log keeps input as the total
      // of uncached, cache-read and cache-written tokens).
      // A guessed call its shim metered whole is known: its figures are the shim's, counted as metered.
      const m = { ...g.metered };
      for (const c of g.guessed) {
        if (!c.shim) continue;
        m.inputTokens += c.shim.usage.inputTokens;
        m.outputTokens += c.shim.usage.outputTokens;
        m.cacheReadTokens += c.shim.usage.cacheReadTokens;
        m.cacheWriteTokens += c.shim.usage.cacheWriteTokens;
      }
      const unknown = g.guessed.filter((c) => !c.shim);
      const cacheRead = r.cacheRead - m.cacheReadTokens;
      const cacheWrite = r.cacheWrite5m + r.cacheWrite1h - m.cacheWriteTokens;
      const rest: Rest = {
        uncached: r.uncachedInput - (m.inputTokens - m.cacheReadTokens - m.cacheWriteTokens),
        cacheRead,
        cacheWrite,
        output: r.output - m.outputTokens,
      };
      if (Object.values(rest).some((v) => v < 0)) {
        outcomes.push({
          kind: "waiting",
          why: `${g.model}: the report holds less than was metered (not complete yet)`,
        });
        continue;
      }
      if (r.cacheWrite1h > 0 && rest.cacheWrite > 0) {
        outcomes.push({ kind: "skipped", why: `${g.model}: 1-hour cache writes are not kept per call` });
        continue;
      }
      const priceAs = prices.knows(g.alias) ? g.alias : g.model;
      const at = Math.min(...g.guessed.map((c) => c.atMs));
      const restUsage = usageOf(rest);
      const restCost = prices.cost(priceAs, restUsage, at).costNanoUsd;
      const reserved = unknown.reduce((a, c) => a + c.reserveNanoUsd, 0);
      if (restCost > reserved) {
        outcomes.push({
          kind: "skipped",
          why: `${g.model}: the report holds more than the guessed calls could cost (the key is used elsewhere)`,
        });
        continue;
      }
      for (const c of g.guessed) {
        if (!c.shim) continue;
        if (
          await trueUpSpend(d.db, c.requestId, "reported", c.shim.usage, c.shim.costNanoUsd, prices.version)
        )
          calls++;
      }
      if (unknown.length === 0) continue;
      const shares = split(
        rest,
        unknown.map((c) => Math.max(1, c.reserveNanoUsd)),
      );
      const status = unknown.length === 1 ? "reported" : "apportioned";
      for (const [i, c] of unknown.entries()) {
        const usage = usageOf(shares[i]!);
        const cost = prices.cost(priceAs, usage, c.atMs);
        const spend: SpendTokens = {
          inputTokens: usage.inputTokens,
          outputTokens: usage.outputTokens,
          cacheReadTokens: usage.cacheReadTokens,
          cacheWriteTokens: usage.cacheWriteTokens,
          reasoningTokens: 0,
        };
        if (await trueUpSpend(d.db, c.requestId, status, spend, cost.costNanoUsd, cost.priceVersion)) calls++;
      }
    }
    outcomes.push({ kind: "trued", calls });
  }
  return outcomes;
}

interface Rest {
  uncached: number;
  cacheRead: number;
  cacheWrite: number;
  output: number;
}

function usageOf(r: Rest): TokenUsage {
  return {
    inputTokens: r.uncached + r.cacheRead + r.cacheWrite,
    outputTokens: r.output,
    cacheReadTokens: r.cacheRead,
    cacheWriteTokens: r.cacheWrite,
    cacheWrite1hTokens: 0,
    reasoningTokens: 0,
  };
}

/** Each class split in proportion to the weights, whole tokens, the remainders to the largest weights first. */
function split(r: Rest, weights: readonly number[]): Rest[] {
  const total = weights.reduce((a, w) => a + w, 0);
  const order = weights.map((w, i) => ({ w, i })).sort((a, b) => b.w - a.w || a.i - b.i);
  const out: Rest[] = weights.map(() => ({ uncached: 0, cacheRead: 0, cacheWrite: 0, output: 0 }));
  for (const k of ["uncached", "cacheRead", "cacheWrite", "output"] as const) {
    let given = 0;
    for (const [i, w] of weights.entries()) {
      const share = Number((BigInt(r[k]) * BigInt(w)) / BigInt(total));
      out[i]![k] = share;
      given += share;
    }
    for (let j = 0; given < r[k]; j = (j + 1) % order.length, given++) out[order[j]!.i]![k] += 1;
  }
  return out;
}
