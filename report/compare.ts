import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import type { CompareInput, CompareRow, RunEnvironment } from "../store/compare.js";
import { isResolved, isScored } from "./aggregate.js";
import type { Interval } from "./bootstrap.js";
import {
  costPerResolved,
  mcnemarExact,
  type PairedTask,
  pairedDifference,
  winsLossesTies,
} from "./paired.js";

/*
 * `evalfleet compare`: two arms on the same tasks, paired task by task. Within one run the arms are its harnesses
 * (or models) on each model (or harness); across two runs they are the runs, matched on harness × model (or on
 * harness, or model, with `by`). Only attempts with an outcome count; a task counts when both arms scored it.
 */

export type CompareBy = "harness" | "model";

/** One side of a comparison. */
export interface ArmSummary {
  label: string;
  run: string;
  /** null when the arm pools several */
  harness: string | null;
  model: string | null;
  /** over the paired tasks */
  scored: number;
  resolved: number;
  rate: number | null;
  costNanoUsd: number;
  costPerResolved: { valueNanoUsd: number | null; ci95: Interval | null };
}

export interface Comparison {
  a: ArmSummary;
  b: ArmSummary;
  /** tasks both arms scored */
  pairedTasks: number;
  /** tasks only one arm scored (left out) */
  unpairedTasks: { onlyA: number; onlyB: number };
  perTask: { wins: number; losses: number; ties: number };
  /** single attempts paired by task (and model / harness across runs) and repeat */
  mcnemar: { pairs: number; aOnly: number; bOnly: number; both: number; neither: number; pValue: number };
  /** resolved rate A − B over the paired tasks, with the paired task-bootstrap 95% interval */
  difference: { value: number | null; ci95: Interval | null };
  /** the compared cells ran under different caps, versions or images */
  warnings: string[];
}

export interface CompareReport {
  runs: string[];
  by: CompareBy | "harness × model";
  generatedAt: string;
  comparisons: Comparison[];
}

interface Arm {
  run: string;
  harness: string | null;
  model: string | null;
  rows: CompareRow[];
  env: RunEnvironment;
  /** what else, beside task and repeat, pairs an attempt with the other arm's */
  pairOn: (r: CompareRow) => string;
}

const label = (a: Arm, showRun: boolean) =>
  [showRun ? a.run : null, [a.harness, a.model].filter((x) => x !== null).join(" / ") || null]
    .filter((x) => x !== null)
    .join(": ");

const distinct = (xs: Iterable<string>) => [...new Set(xs)].sort();

/** The arms to compare, in pairs. */
function armPairs(inputs: readonly CompareInput[], by: CompareBy | undefined): Array<[Arm, Arm]> {
  const [x, y] = inputs;
  if (!x) return [];
  if (!y) {
    const dim = by ?? "harness";
    const other = dim === "harness" ? "model" : "harness";
    const out: Array<[Arm, Arm]> = [];
    for (const o of distinct(x.rows.map((r) => r[other]))) {
      const values = distinct(x.rows.filter((r) => r[other] === o).map((r) => r[dim]));
      const arm = (v: string): Arm => ({
        run: x.env.run,
        harness: dim === "harness" ? v : o,
        model: dim === "model" ? v : o,
        rows: x.rows.filter((r) => r[dim] === v && r[other] === o),
        env: x.env,
        pairOn: () => "",
      });
      for (let i = 0; i < values.length; i++)
        for (let j = i + 1; j < values.length; j++) out.push([arm(values[i]!), arm(values[j]!)]);
    }
    return out;
  }
  const runArm = (input: CompareInput, harness: string | null, model: string | null): Arm => ({
    run: input.env.run,
    harness,
    model,
    rows: input.rows.filter(
      (r) => (harness === null || r.harness === harness) && (model === null || r.model === model),
    ),
    env: input.env,
    pairOn: (r) => `${harness === null ? r.harness : ""}\u0000${model === null ? r.model : ""}`,
  });
  if (by) {
    const common = distinct(x.rows.map((r) => r[by])).filter((v) => y.rows.some((r) => r[by] === v));
    if (common.length === 0)
      throw new EvalfleetError(
        ErrorCode.InvalidConfig,
        `runs ${x.env.run} and ${y.env.run} share no ${by}; compare them --by ${by === "harness" ? "model" : "harness"}, or without --by`,
      );
    return common.map((v) => [
      runArm(x, by === "harness" ? v : null, by === "model" ? v : null),
      runArm(y, by === "harness" ? v : null, by === "model" ? v : null),
    ]);
  }
  const groups = (i: CompareInput) => distinct(i.rows.map((r) => `${r.harness}\u0000${r.model}`));
  const gx = groups(x);
  const gy = groups(y);
  const common = gx.filter((g) => gy.includes(g));
  if (common.length > 0)
    return common.map((g) => {
      const [h, m] = g.split("\u0000") as [string, string];
      return [runArm(x, h, m), runArm(y, h, m)];
    });
  if (gx.length === 1 && gy.length === 1) {
    const [hx, mx] = gx[0]!.split("\u0000") as [string, string];
    const [hy, my] = gy[0]!.split("\u0000") as [string, string];
    return [[runArm(x, hx, mx), runArm(y, hy, my)]];
  }
  throw new EvalfleetError(
    ErrorCode.InvalidConfig,
    `runs ${x.env.run} and ${y.env.run} share no harness × model, and each has several; say what to pair: --by harness (the same harness, its models pooled) or --by model`,
  );
}

const cfgNumber = (env: RunEnvironment, key: string): unknown => env.config?.[key] ?? null;

function harnessVersions(arm: Arm): Record<string, string> {
  const list = (arm.env.config?.harnesses ?? []) as Array<{
    name?: string;
    adapter?: string;
    version?: string;
  }>;
  const out: Record<string, string> = {};
  for (const h of distinct(arm.rows.map((r) => r.harness))) {
    const spec = list.find((x) => x.name === h);
    out[h] = `${spec?.adapter ?? "?"}${spec?.version ? ` ${spec.version}` : " (unpinned)"}`;
  }
  return out;
}

/** What differs between the arms that should not: caps, versions, images, sandboxes, price data. */
function environmentWarnings(a: Arm, b: Arm, la: string, lb: string): string[] {
  const out: string[] = [];
  const both = (what: string, va: unknown, vb: unknown) => {
    if (JSON.stringify(va) !== JSON.stringify(vb))
      out.push(`${what} differ: ${JSON.stringify(va)} (${la}) vs ${JSON.stringify(vb)} (${lb})`);
  };
  if (a.env.run !== b.env.run) {
    for (const cap of ["max_turns", "max_cost_usd", "timeout_seconds"])
      both(`caps (${cap})`, cfgNumber(a.env, cap), cfgNumber(b.env, cap));
    both("evalfleet versions", a.env.evalfleetVersion, b.env.evalfleetVersion);
    both("images", a.env.dockerImage, b.env.dockerImage);
    both("price data versions", a.env.priceVersions, b.env.priceVersions);
  }
  // The same harness on both sides must be the same harness: its adapter and pinned version.
  const va = harnessVersions(a);
  const vb = harnessVersions(b);
  for (const h of Object.keys(va)) if (h in vb) both(`harness versions (${h})`, va[h], vb[h]);
  both(
    "sandboxes",
    distinct(a.rows.map((r) => r.sandbox ?? "unknown")),
    distinct(b.rows.map((r) => r.sandbox ?? "unknown")),
  );
  return out;
}

function compareArms(a: Arm, b: Arm, showRun: boolean): Comparison {
  const la = label(a, showRun);
  const lb = label(b, showRun);
  const tally = (rows: CompareRow[]) => {
    const tasks = new Map<string, { n: number; c: number; cost: number }>();
    for (const r of rows) {
      const t = tasks.get(r.taskId) ?? { n: 0, c: 0, cost: 0 };
      t.cost += r.costNanoUsd;
      if (isScored(r)) {
        t.n++;
        if (isResolved(r)) t.c++;
      }
      tasks.set(r.taskId, t);
    }
    return tasks;
  };
  const ta = tally(a.rows);
  const tb = tally(b.rows);
  const paired: PairedTask[] = [];
  for (const [taskId, x] of ta) {
    const y = tb.get(taskId);
    if (x.n > 0 && y && y.n > 0)
      paired.push({ taskId, a: { n: x.n, c: x.c }, b: { n: y.n, c: y.c }, costA: x.cost, costB: y.cost });
  }
  paired.sort((p, q) => p.taskId.localeCompare(q.taskId));
  const pairedIds = new Set(paired.map((p) => p.taskId));
  const scoredOnly = (m: Map<string, { n: number }>) =>
    [...m].filter(([id, t]) => t.n > 0 && !pairedIds.has(id)).length;

  // McNemar: single attempts, same task, same repeat (and same model / harness when arms pool them).
  const key = (arm: Arm, r: CompareRow) => `${r.taskId}\u0000${arm.pairOn(r)}\u0000${r.repeat ?? r.cellId}`;
  const bRows = new Map(b.rows.filter(isScored).map((r) => [key(b, r), isResolved(r)]));
  const m = { pairs: 0, aOnly: 0, bOnly: 0, both: 0, neither: 0 };
  for (const r of a.rows.filter(isScored)) {
    const other = bRows.get(key(a, r));
    if (other === undefined || !pairedIds.has(r.taskId)) continue;
    const mine = isResolved(r);
    m.pairs++;
    if (mine && other) m.both++;
    else if (mine) m.aOnly++;
    else if (other) m.bOnly++;
    else m.neither++;
  }
  const summary = (arm: Arm, side: "a" | "b", lbl: string): ArmSummary => {
    const scored = paired.reduce((s, p) => s + p[side].n, 0);
    const resolved = paired.reduce((s, p) => s + p[side].c, 0);
    return {
      label: lbl,
      run: arm.run,
      harness: arm.harness,
      model: arm.model,
      scored,
      resolved,
      rate: scored === 0 ? null : resolved / scored,
      costNanoUsd: paired.reduce((s, p) => s + (side === "a" ? p.costA : p.costB), 0),
      costPerResolved: costPerResolved(paired, side),
    };
  };
  return {
    a: summary(a, "a", la),
    b: summary(b, "b", lb),
    pairedTasks: paired.length,
    unpairedTasks: { onlyA: scoredOnly(ta), onlyB: scoredOnly(tb) },
    perTask: winsLossesTies(paired),
    mcnemar: { ...m, pValue: mcnemarExact(m.aOnly, m.bOnly) },
    difference: pairedDifference(paired),
    warnings: environmentWarnings(a, b, la, lb),
  };
}

/** Every comparison of the runs given (one run: its harnesses, or models, pairwise; two runs: run against run). */
export function buildComparisons(
  inputs: readonly CompareInput[],
  opts: { by?: CompareBy; generatedAt?: string } = {},
): CompareReport {
  const pairs = armPairs(inputs, opts.by);
  const showRun = inputs.length > 1;
  return {
    runs: inputs.map((i) => i.env.run),
    by: opts.by ?? (inputs.length > 1 ? "harness × model" : "harness"),
    generatedAt: opts.generatedAt ?? new Date().toISOString(),
    comparisons: pairs.map(([a, b]) => compareArms(a, b, showRun)),
  };
}
