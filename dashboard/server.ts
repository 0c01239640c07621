import { readFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import type { KV } from "@nats-io/kv";
import type { DashboardAccess } from "../config/index.js";
import { type Logger, silentLogger } from "../lib/log.js";
import type { Plane } from "../plane/connect.js";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import { buildReport } from "../report/aggregate.js";
import { loadReportInput } from "../report/load.js";
import type { Db } from "../store/db.js";
import { listCellIds } from "../store/results.js";
import { admit } from "./access.js";
import { apiRoute } from "./api.js";
import { cellDetail } from "./drill.js";
import { type Change, type LiveCell, LiveKeys, LiveState, STALE_PACER_MS, summarize } from "./live.js";

/*
 * The dashboard: node:http serving one page, JSON reads, and one SSE stream per open page. Live state comes from
 * two KV watches (progress, pacer) folded into one LiveState shared by every client; each stream gets one
 * snapshot, then deltas coalesced every `flushMs` (only cells that changed), so a 20,000-cell run costs a client
 * one compact snapshot and small updates. Durable figures (report, drill-down) come from PostgreSQL on request.
 */

export interface DashboardOptions {
  plane: Plane;
  db: Db;
  /** where the results come from, for messages ("embedded PGlite (…)", "PostgreSQL (…)") */
  dbLabel?: string;
  /** Host names it answers to and an optional token (default: localhost and IP addresses, no token) */
  access?: DashboardAccess;
  port?: number;
  host?: string;
  log?: Logger;
  flushMs?: number;
}

export interface Dashboard {
  /** the page's URL; with a token, the URL to open once (it sets the cookie) */
  url: string;
  port: number;
  close(): Promise<void>;
}

/** One letter per status: the grid's wire format. */
export const STATUS_CODE: Record<LiveCell["status"], string> = {
  pending: "p",
  running: "r",
  completed: "c",
  failed: "f",
  skipped: "s",
};

interface Client {
  res: ServerResponse;
  run: string;
  /** Set once the snapshot is sent: deltas before it would reach a page with no grid yet. */
  ready: boolean;
}

const STATIC: Record<string, string> = {
  "/": "index.html",
  "/app.js": "app.js",
  "/app.css": "app.css",
};
const TYPES: Record<string, string> = {
  html: "text/html; charset=utf-8",
  js: "text/javascript; charset=utf-8",
  css: "text/css; charset=utf-8",
  svg: "image/svg+xml; charset=utf-8",
  text: "text/plain; charset=utf-8",
};

/** Fold a KV watch into the state until stopped; resolves `ready` at the end of the initial replay. */
async function follow(
  kv: KV,
  key: string,
  apply: (e: Parameters<LiveState["applyProgress"]>[0]) => void,
  ready: () => void,
) {
  const it = await kv.watch({ key });
  // An empty replay sends nothing: the stream counts as replayed when it stays quiet this long.
  let quiet = setTimeout(ready, 1_000);
  void (async () => {
    for await (const e of it) {
      apply(e);
      clearTimeout(quiet);
      if (e.isUpdate) ready();
      else quiet = setTimeout(ready, 500);
    }
  })();
  return it;
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json; charset=utf-8", "cache-control": "no-store" });
  res.end(text);
}

export async function startDashboard(opts: DashboardOptions): Promise<Dashboard> {
  const log = opts.log ?? silentLogger();
  const staticDir = join(import.meta.dirname, "static");
  const files = new Map<string, Buffer>();
  for (const f of new Set(Object.values(STATIC))) files.set(f, await readFile(join(staticDir, f)));

  const state = new LiveState();
  const clients = new Set<Client>();
  const dirtyRuns = new Set<string>();
  const dirtyCells = new Map<string, Map<string, LiveCell>>();
  let pacerDirty = false;
  let lastPacerSent = 0;

  const onChange = (c: Change | null) => {
    if (!c) return;
    if (c.kind === "cell") {
      let m = dirtyCells.get(c.run);
      if (!m) {
        m = new Map();
        dirtyCells.set(c.run, m);
      }
      m.set(c.cell.cellId, c.cell);
      dirtyRuns.add(c.run);
    } else if (c.kind === "run" || c.kind === "pool" || c.kind === "cellDeleted") dirtyRuns.add(c.run);
    else if (c.kind === "pacer") pacerDirty = true;
  };
  let progressReady!: () => void;
  let pacerReady!: () => void;
  const replayed = Promise.all([
    new Promise<void>((r) => {
      progressReady = r;
    }),
    new Promise<void>((r) => {
      pacerReady = r;
    }),
  ]);
  const watchers = await Promise.all([
    follow(
      opts.plane.kv.progress,
      ">",
      (e) => onChange(state.applyProgress(e)),
      () => progressReady(),
    ),
    follow(
      opts.plane.kv.pacer,
      LiveKeys.pacerPools,
      (e) => onChange(state.applyPacer(e)),
      () => pacerReady(),
    ),
  ]);
  await replayed;

  const pacerView = () => {
    const now = Date.now();
    return [...state.pacer.values()]
      .sort((a, b) => a.pool.localeCompare(b.pool))
      .map((p) => ({
        pool: p.pool,
        ownerAlive: p.owner !== null && now - p.heartbeatWallMs <= STALE_PACER_MS,
        limits: p.limits,
        pausedForMs: Math.max(0, p.pausedUntilWallMs - now),
        overloadStreak: p.overloadStreak,
        settledCalls: p.settledCalls,
        outputTokensP95: p.outputTokensP95,
      }));
  };
  const cellTuple = (c: LiveCell) => [c.cellId, STATUS_CODE[c.status], c.attempt, c.costNanoUsd] as const;
  const send = (res: ServerResponse, event: string, data: unknown) =>
    res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);

  /** The grid's layout: every cell of the run in cell-id order (run_state), plus any KV knows beyond it. */
  async function snapshot(run: string) {
    const ids = await listCellIds(opts.db, run);
    const live = state.cells.get(run) ?? new Map<string, LiveCell>();
    const known = new Set(ids);
    for (const id of [...live.keys()].sort()) if (!known.has(id)) ids.push(id);
    let st = "";
    const attempts: number[] = [];
    const cost: number[] = [];
    for (const id of ids) {
      const c = live.get(id);
      st += c ? STATUS_CODE[c.status] : "p";
      attempts.push(c?.attempt ?? 0);
      cost.push(c?.costNanoUsd ?? 0);
    }
    return {
      summary: summarize(state, run),
      runs: runList(),
      cells: { ids, st, attempts, cost },
      pacer: pacerView(),
    };
  }
  const runList = () => state.runNames().map((r) => summarize(state, r));

  const flush = () => {
    const sendPacer = pacerDirty && Date.now() - lastPacerSent >= 1_000;
    if (dirtyRuns.size === 0 && !sendPacer) return;
    const runs = dirtyRuns.size > 0 ? runList() : undefined;
    for (const c of clients) {
      if (!c.ready) continue;
      const delta: Record<string, unknown> = {};
      if (dirtyRuns.has(c.run)) {
        delta.summary = summarize(state, c.run);
        const cells = dirtyCells.get(c.run);
        if (cells) delta.cells = [...cells.values()].map(cellTuple);
      }
      if (runs) delta.runs = runs;
      if (sendPacer) delta.pacer = pacerView();
      if (Object.keys(delta).length > 0) send(c.res, "delta", delta);
    }
    dirtyRuns.clear();
    dirtyCells.clear();
    if (sendPacer) {
      pacerDirty = false;
      lastPacerSent = Date.now();
    }
  };
  const flushTimer = setInterval(flush, opts.flushMs ?? 250);
  // Proxies drop idle streams; a comment line every 15 s keeps them open.
  const pingTimer = setInterval(() => {
    for (const c of clients) c.res.write(": ping\n\n");
  }, 15_000);

  const access: DashboardAccess = opts.access ?? { allowedHosts: [] };
  async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://dashboard");
    if (!admit(req, res, url, access)) return;
    const file = STATIC[url.pathname];
    if (req.method === "GET" && file) {
      res.writeHead(200, { "content-type": TYPES[file.split(".").pop()!]!, "cache-control": "no-cache" });
      res.end(files.get(file));
      return;
    }
    if (req.method !== "GET") return sendJson(res, 405, { error: "only GET" });
    if (url.pathname === "/api/runs") return sendJson(res, 200, runList());
    const answer = await apiRoute(url, {
      db: opts.db,
      blobs: opts.plane.blobs,
      label: opts.dbLabel ?? "the results database",
    }).catch((err: unknown) => {
      if (err instanceof EvalfleetError)
        return {
          status: err.code === ErrorCode.NotFound ? 404 : 400,
          type: "json" as const,
          body: { error: err.message },
        };
      throw err;
    });
    if (answer) {
      if (answer.type === "json") return sendJson(res, answer.status, answer.body);
      res.writeHead(answer.status, { "content-type": TYPES[answer.type]!, "cache-control": "no-store" });
      res.end(String(answer.body));
      return;
    }
    const m = /^\/api\/runs\/([^/]+)(?:\/(stream|report|cells)(?:\/([^/]+))?)?$/.exec(url.pathname);
    if (!m) return sendJson(res, 404, { error: `no such page: ${url.pathname}` });
    const run = decodeURIComponent(m[1]!);
    const what = m[2];
    const known = state.runs.has(run);
    if (what === "stream") {
      if (!known)
        return sendJson(res, 404, {
          error: `run "${run}" has no progress key; runs: ${state.runNames().join(", ")}`,
        });
      res.writeHead(200, {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-store",
        connection: "keep-alive",
      });
      res.write("retry: 2000\n\n");
      const client: Client = { res, run, ready: false };
      clients.add(client);
      req.on("close", () => clients.delete(client));
      // The snapshot is built from the state as it is when sent (synchronously), and deltas start right after it.
      send(res, "snapshot", await snapshot(run));
      client.ready = true;
      return;
    }
    if (what === "report") {
      const report = buildReport(await loadReportInput(opts.db, run));
      return sendJson(res, 200, report);
    }
    if (what === "cells" && m[3])
      return sendJson(res, 200, await cellDetail(opts.db, opts.plane.blobs, run, decodeURIComponent(m[3])));
    if (!what)
      return known
        ? sendJson(res, 200, summarize(state, run))
        : sendJson(res, 404, { error: `unknown run ${run}` });
    return sendJson(res, 404, { error: `no such page: ${url.pathname}` });
  }

  const server = createServer((req, res) => {
    route(req, res).catch((err: unknown) => {
      log.warn({ err: String(err), url: req.url }, "dashboard request failed");
      if (!res.headersSent) sendJson(res, 500, { error: String(err) });
      else res.end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(opts.port ?? 8080, opts.host ?? "127.0.0.1", () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const shown = opts.host ?? "127.0.0.1";
  const base = `http://${shown === "0.0.0.0" || shown === "::" ? "127.0.0.1" : shown.includes(":") ? `[${shown}]` : shown}:${port}/`;
  return {
    url: access.token ? `${base}?token=${encodeURIComponent(access.token)}` : base,
    port,
    async close() {
      clearInterval(flushTimer);
      clearInterval(pingTimer);
      for (const w of watchers) w.stop();
      for (const c of clients) c.res.end();
      clients.clear();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
