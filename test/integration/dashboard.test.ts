import assert from "node:assert/strict";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { BrowserContext, Page } from "playwright-core";
import type { Dashboard } from "../../dashboard/server.js";
import type { Plane } from "../../plane/connect.js";
import {
  type CellProgress,
  emptyRunProgress,
  emptyUsage,
  type RunProgress,
} from "../../protocol/messages.js";
import { BlobNames, ProgressKeys, StateKeys } from "../../protocol/subjects.js";
import { insertPendingCells } from "../../store/results.js";
import type { FreshDb } from "../helpers/db.js";
import { cellProgressKey, type DashboardRig, startDashboardRig } from "./dashboard-fixture.js";
import { cellId, RUN, TASKS } from "./report-seed.js";

export const SCREENSHOT = path.join(tmpdir(), "evalfleet-dashboard.png");
export const SCREENSHOT_DRILL = path.join(tmpdir(), "evalfleet-dashboard-drill.png");
export const SCREENSHOT_BIG = path.join(tmpdir(), "evalfleet-dashboard-20k.png");

/** A cell's key: one call of 1,000 input tokens costing `cost`. */
const cellKey = (run: string, cell: string, status: CellProgress["status"], cost = 0) =>
  cellProgressKey(run, cell, status, {
    usage: { ...emptyUsage(), inputTokens: 1000, costNanoUsd: cost, calls: 1 },
    turns: 3,
    pacerWaitMs: 40,
  });

function runKey(p: Partial<RunProgress> & Pick<RunProgress, "run">): string {
  return JSON.stringify(emptyRunProgress({ phase: "running", message: "", ...p }));
}

/** What the page exposes to the test; Node's types have no DOM, so the page's globals are described here. */
interface PageGlobals {
  __grid: { ids: string[]; st: string[]; index: Map<string, number>; cols: number; size: number };
  document: {
    getElementById(id: string): {
      textContent: string | null;
      getBoundingClientRect(): { left: number; top: number };
    } | null;
  };
}

async function sql(f: FreshDb, q: string, params: unknown[] = [RUN]): Promise<number> {
  const r = await f.db.query<{ v: string | number | null }>(q, params);
  return Number(r.rows[0]?.v ?? 0);
}

/** Wait until an element's text matches (the page updates from SSE on its own schedule). */
async function waitText(page: Page, selector: string, re: RegExp): Promise<void> {
  await page.waitForFunction(
    ([sel, src]) =>
      new RegExp(src!).test(
        (
          globalThis as unknown as {
            document: { querySelector(s: string): { textContent: string | null } | null };
          }
        ).document.querySelector(sel!)?.textContent ?? "",
      ),
    [selector, re.source],
  );
}

const nanoOf = async (page: Page, sel: string) => Number(await page.locator(sel).getAttribute("data-nano"));

describe("dashboard in headless Chromium", () => {
  let rig: DashboardRig;
  let f: FreshDb;
  let plane: Plane;
  let dash: Dashboard;
  let browser: BrowserContext;
  let cells: string[];
  let page: Page;

  before(async () => {
    rig = await startDashboardRig("dashboard");
    ({ f, plane, browser, cells } = rig);
    // One attempt's patch lives only in the object store: a row from before the results-writer kept every patch in
    // diff (the drill-down reads the row first, the blob for such a row).
    const withBlob = cellId("h-alpha", TASKS[0], 0);
    const ref = BlobNames.attempt(RUN, withBlob, 0, "patch.diff");
    await plane.blobs.putBlob(
      { name: ref },
      new TextEncoder().encode("diff --git a/blob b/blob\n+from the object store\n"),
    );
    await f.db.query(
      "UPDATE run_results SET patch_ref = $3, diff = NULL WHERE run_name = $1 AND cell_id = $2",
      [RUN, withBlob, ref],
    );
    dash = await rig.startDashboard({ port: 0, flushMs: 100 });
  });
  after(async () => {
    await rig?.close();
  });

  it("shows live figures from KV and results equal to sums over the database; updates live; drills down", async () => {
    // Live state as the plane writes it: two cells still running, the rest done, money as the results-writer sums it.
    const total = await sql(f, "SELECT sum(cost_nano_usd)::text AS v FROM ledger_calls WHERE run_name = $1");
    const billable = await sql(
      f,
      `SELECT sum(l.cost_nano_usd)::text AS v FROM ledger_calls l LEFT JOIN run_results r
          ON r.run_name = l.run_name AND r.cell_id = l.cell_id
        WHERE l.run_name = $1 AND r.cost_mode IS DISTINCT FROM 'subscription'`,
    );
    const running = cells.slice(-2);
    // The run's key as the results-writer keeps it while those two run: its cap and pool sizes stay put.
    const liveRun = (p: Partial<RunProgress>) =>
      plane.kv.progress.put(
        ProgressKeys.run(RUN),
        runKey({
          run: RUN,
          totalCells: cells.length,
          completed: cells.length - 2,
          budgetNanoUsd: 5_000_000_000,
          pools: { "h-alpha__m-x": { fleetSize: 8 }, "h-beta__m-x": { fleetSize: 4 } },
          ...p,
        }),
      );
    for (const c of cells)
      await plane.kv.progress.put(
        ...cellKey(RUN, c, running.includes(c) ? "running" : "completed", 1_000_000),
      );
    await liveRun({ running: 2, totalCostNanoUsd: total, billableCostNanoUsd: billable });
    await plane.kv.pacer.put(
      StateKeys.pacerPool("h-alpha__m-x"),
      JSON.stringify({
        v: 1,
        owner: "owner-1",
        inbox: "_INBOX.x",
        heartbeatWallMs: Date.now() + 60_000,
        checkpoint: {
          limits: { requestsPerMinute: 50, inputTokensPerMinute: 40000 },
          pausedUntilWallMs: 0,
          overloadStreak: 0,
        },
        stats: { settledCalls: 42, inputTokens: 1, outputTokens: 1, outputTokensP95: 512 },
      }),
    );
    await new Promise((r) => setTimeout(r, 300)); // the dashboard's watch folds the puts

    page = await browser.newPage();
    await page.goto(`${dash.url}#${encodeURIComponent(RUN)}`);
    await page.waitForFunction(
      (n) => (globalThis as unknown as PageGlobals).__grid.ids.length === n,
      cells.length,
    );

    // Live (KV) figures. The snapshot reflects what the dashboard's watch had folded when the page opened; on a
    // slow machine a later delta brings the rest, so wait for the last values written before reading them all.
    await page.waitForSelector(`#live-total-cost[data-nano="${total}"]`);
    await waitText(page, "#pacer tbody", /alive/);
    assert.equal(await page.locator("#live-completed").textContent(), String(cells.length - 2));
    assert.equal(await page.locator("#live-running").textContent(), "2");
    assert.equal(await nanoOf(page, "#live-total-cost"), total);
    assert.equal(await nanoOf(page, "#live-billable"), billable);
    assert.equal(await page.locator("#live-cap").textContent(), "$5.0000");
    assert.match((await page.locator("#live-fleet").textContent()) ?? "", /h-alpha__m-x8/);
    assert.match(
      (await page.locator("#pacer tbody").textContent()) ?? "",
      /h-alpha__m-xalive.*requestsPerMinute=50.*42512/,
    );

    // Results (PostgreSQL) figures equal sums over the database.
    await page.waitForSelector("#db-total-cost");
    assert.equal(await nanoOf(page, "#db-total-cost"), total);
    assert.equal(await nanoOf(page, "#db-billable"), billable);
    assert.equal(
      await nanoOf(page, "#db-retried"),
      await sql(f, "SELECT sum(cost_nano_usd)::text AS v FROM ledger_calls WHERE run_name = $1 AND voided"),
    );
    assert.equal(
      Number(await page.locator("#db-resolved").textContent()),
      await sql(f, "SELECT count(*) AS v FROM run_results WHERE run_name = $1 AND resolved"),
    );
    assert.equal(
      Number(await page.locator("#db-calls").textContent()),
      await sql(f, "SELECT count(*) AS v FROM ledger_calls WHERE run_name = $1"),
    );
    assert.equal(await page.locator("#report tbody tr").count(), 2);

    // A KV put reaches the page without a reload.
    const last = running[1]!;
    await plane.kv.progress.put(...cellKey(RUN, last, "failed", 2_000_000));
    await liveRun({ failed: 1, running: 1, totalCostNanoUsd: total + 7, billableCostNanoUsd: billable + 7 });
    await page.waitForFunction(
      () =>
        (globalThis as unknown as PageGlobals).document.getElementById("live-failed")?.textContent === "1",
      null,
      {
        timeout: 10_000,
      },
    );
    await page.waitForFunction(
      (id) => {
        const g = (globalThis as unknown as PageGlobals).__grid;
        return g.st[g.index.get(id)!] === "f";
      },
      last,
      { timeout: 10_000 },
    );
    assert.equal(await nanoOf(page, "#live-total-cost"), total + 7);

    await page.screenshot({ path: SCREENSHOT, fullPage: true });

    // Drill-down: click the first cell (its patch is in the object store).
    const first = cellId("h-alpha", TASKS[0], 0);
    const at = await page.evaluate((id) => {
      const g = (globalThis as unknown as PageGlobals).__grid;
      const i = g.index.get(id)!;
      const r = (globalThis as unknown as PageGlobals).document
        .getElementById("grid")!
        .getBoundingClientRect();
      return {
        x: r.left + (i % g.cols) * g.size + g.size / 2,
        y: r.top + Math.floor(i / g.cols) * g.size + g.size / 2,
      };
    }, first);
    await page.mouse.move(at.x, at.y);
    await page.mouse.click(at.x, at.y);
    await page.waitForSelector("#drill-ledger-cost");
    assert.equal(await page.locator("#drill-title").textContent(), first);
    assert.equal(
      await nanoOf(page, "#drill-ledger-cost"),
      await sql(
        f,
        "SELECT sum(cost_nano_usd)::text AS v FROM ledger_calls WHERE run_name = $1 AND cell_id = $2",
        [RUN, first],
      ),
    );
    assert.match((await page.locator("#drill-patch").textContent()) ?? "", /from the object store/);
    assert.match((await page.locator("#drill-body").textContent()) ?? "", /FULL \(resolved\)/);

    await page.screenshot({ path: SCREENSHOT_DRILL, fullPage: true });
    process.stderr.write(`dashboard screenshots: ${SCREENSHOT}, ${SCREENSHOT_DRILL}\n`);
  });

  it("renders a 20,000-cell run quickly and applies deltas to it", async () => {
    const big = "big-run";
    const n = 20_000;
    const ids = Array.from({ length: n }, (_, i) => `h__m__task-${String(i).padStart(5, "0")}__r0`);
    await insertPendingCells(f.db, big, ids);
    const statuses: CellProgress["status"][] = ["completed", "failed", "skipped", "running"];
    // Three quarters of the cells have a key; the rest are pending (no key yet).
    for (let i = 0; i < 15_000; i += 1000)
      await Promise.all(
        ids
          .slice(i, i + 1000)
          .map((id, j) => plane.kv.progress.put(...cellKey(big, id, statuses[(i + j) % 4]!, 1000))),
      );
    await plane.kv.progress.put(
      ProgressKeys.run(big),
      runKey({
        run: big,
        totalCells: n,
        completed: 3750,
        failed: 3750,
        skipped: 3750,
        running: 3750,
        pending: 5000,
      }),
    );
    await new Promise((r) => setTimeout(r, 500));
    const p = await browser.newPage();
    const t0 = Date.now();
    await p.goto(`${dash.url}#${big}`);
    await p.waitForFunction((want) => (globalThis as unknown as PageGlobals).__grid.ids.length === want, n);
    const loadMs = Date.now() - t0;
    const counts = () =>
      p.evaluate(() => {
        const st = (globalThis as unknown as PageGlobals).__grid.st;
        const c: Record<string, number> = {};
        for (const s of st) c[s] = (c[s] ?? 0) + 1;
        return JSON.stringify(c);
      });
    const want = JSON.stringify({ c: 3750, f: 3750, s: 3750, r: 3750, p: 5000 });
    // Keys the dashboard's watch folded after the snapshot arrive as deltas; the grid converges on KV.
    for (let i = 0; i < 100 && (await counts()) !== want; i++) await new Promise((r) => setTimeout(r, 100));
    assert.equal(await counts(), want);
    const t1 = Date.now();
    await plane.kv.progress.put(...cellKey(big, ids[19_999]!, "completed"));
    await p.waitForFunction((id) => {
      const g = (globalThis as unknown as PageGlobals).__grid;
      return g.st[g.index.get(id)!] === "c";
    }, ids[19_999]!);
    await p.screenshot({ path: SCREENSHOT_BIG });
    process.stderr.write(
      `20,000 cells: first paint of the grid ${loadMs} ms, one delta ${Date.now() - t1} ms\n`,
    );
    await p.close();
  });
});
