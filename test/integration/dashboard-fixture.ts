import type { BrowserContext } from "playwright-core";
import { type Dashboard, type DashboardOptions, startDashboard } from "../../dashboard/server.js";
import { openPlane, type Plane } from "../../plane/connect.js";
import { type CellProgress, emptyUsage, MessageTypes, type Usage } from "../../protocol/messages.js";
import { ProgressKeys } from "../../protocol/subjects.js";
import { launchChromium } from "../helpers/browser.js";
import { type FreshDb, freshDb } from "../helpers/db.js";
import { startNats, type TestNats } from "../helpers/nats.js";
import { seedReportRun } from "./report-seed.js";

/**
 * What the dashboard's browser suites run against: NATS, a database seeded with the report run (report-seed.ts),
 * a plane connection and headless Chromium. Each suite adds its own rows and keys, then starts the dashboard.
 */
export interface DashboardRig {
  nats: TestNats;
  f: FreshDb;
  plane: Plane;
  browser: BrowserContext;
  /** the seeded run's cells */
  cells: string[];
  /** the dashboard over this rig's plane and database; close() stops it */
  startDashboard(opts: Omit<DashboardOptions, "plane" | "db">): Promise<Dashboard>;
  close(): Promise<void>;
}

export async function startDashboardRig(name: string): Promise<DashboardRig> {
  let chrome: Awaited<ReturnType<typeof launchChromium>> | undefined;
  let dash: Dashboard | undefined;
  let f: FreshDb | undefined;
  let plane: Plane | undefined;
  const nats = await startNats();
  const close = async () => {
    await chrome?.close();
    await dash?.close();
    await plane?.close();
    await f?.cleanup();
    await nats.cleanup();
  };
  try {
    f = await freshDb(name.replace(/-/g, "_"));
    plane = await openPlane({ nats: nats.settings, name });
    const { cells } = await seedReportRun(f.db);
    chrome = await launchChromium();
    const [db, p] = [f.db, plane];
    return {
      nats,
      f,
      plane,
      browser: chrome.browser,
      cells,
      async startDashboard(opts) {
        dash = await startDashboard({ plane: p, db, ...opts });
        return dash;
      },
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}

/** A cell's progress key and value, as the dispatcher and the results-writer put it. */
export function cellProgressKey(
  run: string,
  cell: string,
  status: CellProgress["status"],
  opts: { usage?: Usage; turns?: number; pacerWaitMs?: number } = {},
): [string, string] {
  const v: CellProgress = {
    type: MessageTypes.cellProgress,
    run,
    cellId: cell,
    attempt: 0,
    status,
    usage: opts.usage ?? emptyUsage(),
    turns: opts.turns ?? 1,
    pacerWaitMs: opts.pacerWaitMs ?? 0,
    updatedAt: new Date().toISOString(),
  };
  return [ProgressKeys.cell(run, cell), JSON.stringify(v)];
}
