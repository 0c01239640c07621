import assert from "node:assert/strict";
import { request } from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import type { BrowserContext, Page } from "playwright-core";
import { hostAllowed } from "../../dashboard/access.js";
import type { Dashboard } from "../../dashboard/server.js";
import type { Plane } from "../../plane/connect.js";
import { emptyRunProgress } from "../../protocol/messages.js";
import { BlobNames, ProgressKeys } from "../../protocol/subjects.js";
import { saveRunMetadata } from "../../store/results.js";
import type { FreshDb } from "../helpers/db.js";
import { cellProgressKey, type DashboardRig, startDashboardRig } from "./dashboard-fixture.js";
import { cellId, HARNESSES, RUN, TASKS } from "./report-seed.js";

/*
 * The dashboard's guarded door and its durable views, in headless Chromium: the Host check and the token; the
 * report's plots, the harness × task matrix, the filters, run comparison with its frontier, and an attempt step by
 * step with nothing cut (its trajectory is over 100 KB).
 */

const TOKEN = "dashboard-token-0123456789";
const RUN_B = `${RUN}-b`;
const BIG = cellId(HARNESSES[0], TASKS[0], 0);
export const SCREENSHOT_VIEWS = path.join(tmpdir(), "evalfleet-dashboard-views.png");

function get(
  url: string,
  headers: Record<string, string>,
): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers }, (res) => {
      let body = "";
      res.on("data", (d: Buffer) => {
        body += d.toString();
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

/** A reference-agent trajectory for the three ledger calls of BIG, each turn's text 40 KB. */
function bigTrajectory(): string {
  const lines: string[] = [];
  for (const k of [1, 2, 3])
    lines.push(
      JSON.stringify({
        source: "harness",
        file: "harness-trajectory.jsonl",
        event: {
          turn: k,
          assistant: {
            role: "assistant",
            content: `${k === 3 ? "LAST-STEP-MARKER " : ""}${"x".repeat(40_000)}`,
          },
          tool_results: [],
        },
      }),
    );
  return `${lines.join("\n")}\n`;
}

describe("dashboard: access, matrix, filters, compare, plots, step view", () => {
  let rig: DashboardRig;
  let f: FreshDb;
  let plane: Plane;
  let dash: Dashboard;
  let browser: BrowserContext;
  let cells: string[];
  let base: string;

  before(async () => {
    rig = await startDashboardRig("dashboard-views");
    ({ f, plane, browser, cells } = rig);
    await saveRunMetadata(f.db, { runName: RUN_B, config: { name: RUN_B, max_turns: 10 }, version: "test" });
    await f.db.query(
      `INSERT INTO run_results (run_name, cell_id, harness, model, task_id, repeat, attempt, status, grade_status, resolved, success)
       SELECT $2, cell_id, harness, model, task_id, repeat, attempt, 'PATCH_READY', 'FULL', true, 1
         FROM run_results WHERE run_name = $1`,
      [RUN, RUN_B],
    );
    const text = bigTrajectory();
    assert.ok(text.length > 100_000);
    await plane.blobs.putBlob(
      { name: BlobNames.attempt(RUN, BIG, 0, "trajectory.jsonl") },
      new TextEncoder().encode(text),
    );
    const progress = emptyRunProgress({
      run: RUN,
      phase: "finished",
      message: "",
      totalCells: cells.length,
      completed: cells.length,
    });
    await plane.kv.progress.put(ProgressKeys.run(RUN), JSON.stringify(progress));
    for (const [i, c] of cells.entries())
      await plane.kv.progress.put(...cellProgressKey(RUN, c, i % 4 === 3 ? "failed" : "completed"));
    dash = await rig.startDashboard({ port: 0, flushMs: 100, access: { allowedHosts: [], token: TOKEN } });
    base = `http://127.0.0.1:${dash.port}`;
  });
  after(async () => {
    await rig?.close();
  });

  it("answers only to localhost, IP addresses and allowed names, and only with its token", async () => {
    const rebound = await get(`${base}/api/runs`, {
      host: `attacker.example:${dash.port}`,
      authorization: `Bearer ${TOKEN}`,
    });
    assert.equal(rebound.status, 403);
    assert.match(
      rebound.body,
      /does not answer to the host \\"attacker\.example\\".*EVALFLEET_DASHBOARD_ALLOWED_HOSTS/,
    );
    const none = await get(`${base}/api/runs`, {});
    assert.equal(none.status, 401);
    assert.match(none.body, /needs its token.*Authorization: Bearer/);
    assert.equal(
      (await get(`${base}/api/runs`, { authorization: "Bearer wrong-token-0123456789" })).status,
      401,
    );
    assert.equal((await get(`${base}/api/runs`, { authorization: `Bearer ${TOKEN}` })).status, 200);
    const opened = await get(`${base}/?token=${TOKEN}`, { host: `localhost:${dash.port}` });
    assert.equal(opened.status, 303);
    assert.equal(opened.headers.location, "/");
    const cookie = String(opened.headers["set-cookie"]).split(";")[0]!;
    assert.match(String(opened.headers["set-cookie"]), /HttpOnly; SameSite=Strict/);
    assert.equal((await get(`${base}/`, { cookie })).status, 200);
    assert.match(dash.url, new RegExp(`\\?token=${TOKEN}$`), "the printed URL carries the token");
    assert.ok(
      hostAllowed("[::1]:80", []) &&
        hostAllowed("10.0.0.7:8080", []) &&
        hostAllowed("dash.internal", ["dash.internal"]),
    );
    assert.ok(!hostAllowed("127.0.0.1.nip.io:80", []) && !hostAllowed(undefined, []));
  });

  it("shows the plots, the matrix, filters them, compares runs and walks an attempt step by step", async () => {
    const page: Page = await browser.newPage();
    await page.goto(`${dash.url}#${encodeURIComponent(RUN)}`);
    await page.waitForSelector("#report tbody tr");
    // The report's plots, served as SVG.
    await page.waitForFunction(() => {
      const d = (
        globalThis as unknown as {
          document: { getElementById(id: string): { naturalWidth: number; complete: boolean } };
        }
      ).document;
      return (
        d.getElementById("plot-cost").naturalWidth > 0 && d.getElementById("plot-spend").naturalWidth > 0
      );
    });
    // Harness × task: one row per task, resolved of scored per harness × model.
    await page.waitForSelector("#matrix tbody tr");
    assert.equal(await page.locator("#matrix tbody tr").count(), TASKS.length);
    const row0 = (await page.locator("#matrix tbody tr").first().textContent()) ?? "";
    const want = await f.db.query<{ c: string; n: string }>(
      `SELECT count(*) FILTER (WHERE resolved) AS c, count(*) FILTER (WHERE resolved IS NOT NULL OR success IS NOT NULL) AS n
         FROM run_results WHERE run_name = $1 AND harness = $2 AND task_id = $3`,
      [RUN, HARNESSES[0], TASKS[0]],
    );
    assert.ok(row0.includes(`${want.rows[0]!.c}/${want.rows[0]!.n}`), row0);
    // Filters: one harness, then a status.
    await page.selectOption("#f-harness", HARNESSES[1]);
    assert.equal(await page.locator("#report tbody tr").count(), 1);
    assert.equal(await page.locator("#matrix thead th").count(), 2);
    assert.match((await page.locator("#f-note").textContent()) ?? "", /^6 of 12 cells match$/);
    await page.selectOption("#f-status", "f");
    assert.match((await page.locator("#f-note").textContent()) ?? "", /^\d of 12 cells match$/);
    await page.selectOption("#f-harness", "");
    await page.selectOption("#f-status", "");
    // Compare against the second run.
    await page.waitForSelector(`#cmp-b option[value="${RUN_B}"]`, { state: "attached" });
    await page.selectOption("#cmp-b", RUN_B);
    await page.click("#cmp-go");
    await page.waitForSelector(".cmp .mcnemar");
    assert.equal(await page.locator(".cmp").count(), 2);
    assert.match(
      (await page.locator(".cmp").first().textContent()) ?? "",
      /McNemar exact: A only \d+, B only \d+ of \d+ pairs, p = \d\.\d{3}/,
    );
    assert.match(
      (await page.locator(".cmp").first().textContent()) ?? "",
      /warning: caps \(max_turns\) differ/,
    );
    await page.waitForFunction(
      () =>
        (
          globalThis as unknown as { document: { getElementById(id: string): { naturalWidth: number } } }
        ).document.getElementById("plot-frontier").naturalWidth > 0,
    );
    // Drill into the attempt whose trajectory is over 100 KB: every step, the last one whole.
    await page.locator("#grid").scrollIntoViewIfNeeded();
    const at = await page.evaluate((id) => {
      const g = (
        globalThis as unknown as { __grid: { index: Map<string, number>; cols: number; size: number } }
      ).__grid;
      const i = g.index.get(id)!;
      const r = (
        globalThis as unknown as {
          document: {
            getElementById(id: string): { getBoundingClientRect(): { left: number; top: number } };
          };
        }
      ).document
        .getElementById("grid")
        .getBoundingClientRect();
      return {
        x: r.left + (i % g.cols) * g.size + g.size / 2,
        y: r.top + Math.floor(i / g.cols) * g.size + g.size / 2,
      };
    }, BIG);
    await page.mouse.click(at.x, at.y);
    await page.waitForSelector('#steps-list .step[data-step="4"]');
    assert.equal(await page.locator("#steps-list .step.agent").count(), 3, "one agent step per ledger call");
    const last = (await page.locator('#steps-list .step[data-step="4"]').textContent()) ?? "";
    assert.match(last, /LAST-STEP-MARKER x{39000}/);
    assert.match(last, /in \d[\d,]* \(cached \d+\) · out \d+ · \$\d\.\d{4} · \d+ ms · pacer \d+ ms/);
    assert.match((await page.locator("#steps-summary").textContent()) ?? "", /^4 steps · /);
    await page.screenshot({ path: SCREENSHOT_VIEWS, fullPage: true });
    process.stderr.write(`dashboard views screenshot: ${SCREENSHOT_VIEWS}\n`);
    await page.close();
  });
});
