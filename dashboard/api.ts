import type { ObjectStore } from "@nats-io/obj";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import { BlobNames } from "../protocol/subjects.js";
import { buildReport, isResolved, isScored } from "../report/aggregate.js";
import { attemptToAtif } from "../report/atif.js";
import { buildComparisons, type CompareBy } from "../report/compare.js";
import { loadReportInput } from "../report/load.js";
import { frontierSvg, resolvedVsCostSvg, spendOverTimeSvg } from "../report/svg.js";
import { loadCompareInput } from "../store/compare.js";
import type { Db } from "../store/db.js";
import { assertRunExists, knownRuns, loadAttempts } from "../store/report.js";
import { getRunMetadata } from "../store/results.js";
import { loadTrajectoryCalls, loadTrajectoryCells } from "../store/trajectories.js";

/*
 * The dashboard's durable reads beyond the report and the drill-down: the harness × task matrix, run comparison,
 * the report's plots, and an attempt step by step (ATIF, the whole trajectory: nothing cut). Each answers one
 * request from PostgreSQL and the object store; null means "not one of these routes".
 */

export interface ApiAnswer {
  status: number;
  type: "json" | "svg" | "text";
  body: unknown;
}

const json = (body: unknown, status = 200): ApiAnswer => ({ status, type: "json", body });
const svg = (body: string): ApiAnswer => ({ status: 200, type: "svg", body });

/** Per task, per harness × model: scored and resolved attempts, and attempts still without an outcome. */
export interface Matrix {
  run: string;
  groups: Array<{ harness: string; model: string }>;
  tasks: string[];
  /** cells[task index][group index] */
  cells: Array<Array<{ n: number; c: number; open: number } | null>>;
}

export async function harnessTaskMatrix(db: Db, run: string): Promise<Matrix> {
  const rows = await loadAttempts(db, run);
  const gKey = (h: string, m: string) => `${h}\u0000${m}`;
  const groups = [
    ...new Map(rows.map((r) => [gKey(r.harness, r.model), { harness: r.harness, model: r.model }])),
  ]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([, g]) => g);
  const gi = new Map(groups.map((g, i) => [gKey(g.harness, g.model), i]));
  const tasks = [...new Set(rows.map((r) => r.taskId))].sort();
  const ti = new Map(tasks.map((t, i) => [t, i]));
  const cells: Matrix["cells"] = tasks.map(() => groups.map(() => null));
  for (const r of rows) {
    const row = cells[ti.get(r.taskId)!]!;
    const i = gi.get(gKey(r.harness, r.model))!;
    const c = row[i] ?? { n: 0, c: 0, open: 0 };
    if (isScored(r)) {
      c.n++;
      if (isResolved(r)) c.c++;
    } else c.open++;
    row[i] = c;
  }
  return { run, groups, tasks, cells };
}

async function blobText(blobs: ObjectStore | null, ref: string): Promise<string | null> {
  if (!blobs) return null;
  const bytes = await blobs.getBlob(ref).catch(() => null);
  return bytes === null ? null : new TextDecoder().decode(bytes);
}

function attemptOf(url: URL, latest: number): number {
  const a = url.searchParams.get("attempt");
  if (a === null) return latest;
  const n = Number(a);
  if (!Number.isInteger(n) || n < 0 || n > latest)
    throw new EvalfleetError(ErrorCode.InvalidConfig, `attempt must be a whole number from 0 to ${latest}`);
  return n;
}

/** One attempt as ATIF steps (the same document `evalfleet trajectories` writes). */
async function steps(
  db: Db,
  blobs: ObjectStore | null,
  run: string,
  cellId: string,
  url: URL,
): Promise<ApiAnswer> {
  const [cell] = await loadTrajectoryCells(db, run, cellId);
  if (!cell) return json({ error: `cell ${cellId} of run ${run} has no attempt row yet` }, 404);
  const attempt = attemptOf(url, cell.attempt);
  const [calls, meta, text] = await Promise.all([
    loadTrajectoryCalls(db, run, cellId),
    getRunMetadata(db, run),
    blobText(blobs, BlobNames.attempt(run, cellId, attempt, "trajectory.jsonl")),
  ]);
  let config: { harnesses?: Array<{ name?: string; adapter?: string; version?: string }> } = {};
  try {
    config = meta ? (JSON.parse(meta.configJson) as typeof config) : {};
  } catch {
    config = {};
  }
  const spec = config.harnesses?.find((h) => h.name === cell.harness);
  const latest = attempt === cell.attempt;
  return json(
    attemptToAtif({
      run,
      cellId,
      attempt,
      harness: cell.harness ?? "unknown",
      adapter: spec?.adapter ?? null,
      harnessVersion: spec?.version ?? null,
      model: cell.model ?? "unknown",
      taskId: cell.taskId ?? cellId,
      repeat: cell.repeat,
      status: latest ? cell.status : "RETRIED",
      gradeStatus: latest ? cell.gradeStatus : null,
      resolved: latest ? cell.resolved : null,
      errorClass: latest ? cell.errorClass : null,
      calls: calls.filter((c) => c.attempt === attempt),
      trajectory: text,
    }),
  );
}

export async function apiRoute(
  url: URL,
  ctx: { db: Db; blobs: ObjectStore | null; label: string },
): Promise<ApiAnswer | null> {
  const p = url.pathname;
  if (p === "/api/db-runs") return json(await knownRuns(ctx.db, 200));
  if (p === "/api/compare" || p === "/api/plots/frontier.svg") {
    const runs = [url.searchParams.get("a"), url.searchParams.get("b")].filter((r): r is string => !!r);
    if (runs.length === 0)
      return json({ error: "name run a (and optionally b): /api/compare?a=RUN&b=RUN&by=harness" }, 400);
    for (const r of runs) await assertRunExists(ctx.db, r, ctx.label);
    if (p.endsWith(".svg"))
      return svg(
        frontierSvg(await Promise.all(runs.map(async (r) => buildReport(await loadReportInput(ctx.db, r))))),
      );
    const by = url.searchParams.get("by");
    if (by !== null && by !== "harness" && by !== "model")
      return json({ error: `by must be harness or model, got "${by}"` }, 400);
    const inputs = await Promise.all(runs.map((r) => loadCompareInput(ctx.db, r)));
    return json(buildComparisons(inputs, by ? { by: by as CompareBy } : {}));
  }
  const m =
    /^\/api\/runs\/([^/]+)\/(matrix|plots\/(resolved-vs-cost|spend-over-time)\.svg|cells\/([^/]+)\/(steps|trajectory\.jsonl))$/.exec(
      p,
    );
  if (!m) return null;
  const run = decodeURIComponent(m[1]!);
  if (m[2] === "matrix") return json(await harnessTaskMatrix(ctx.db, run));
  if (m[3]) {
    const report = buildReport(await loadReportInput(ctx.db, run));
    return svg(m[3] === "resolved-vs-cost" ? resolvedVsCostSvg(report) : spendOverTimeSvg(report));
  }
  const cellId = decodeURIComponent(m[4]!);
  if (m[5] === "steps") return await steps(ctx.db, ctx.blobs, run, cellId, url);
  const [cell] = await loadTrajectoryCells(ctx.db, run, cellId);
  if (!cell) return json({ error: `cell ${cellId} of run ${run} has no attempt row yet` }, 404);
  const text = await blobText(
    ctx.blobs,
    BlobNames.attempt(run, cellId, attemptOf(url, cell.attempt), "trajectory.jsonl"),
  );
  return text === null
    ? json({ error: "no trajectory in the object store for that attempt" }, 404)
    : { status: 200, type: "text", body: text };
}
