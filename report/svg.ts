import type { Report } from "./types.js";

/*
 * Plots as standalone SVG, drawn by hand (no plotting dependency): resolved rate against cost per harness × model
 * (with its 95% interval as an error bar), the same across runs with the cost frontier, and cumulative spend over
 * time. The dashboard serves the same SVG.
 */

/** The plot's own width; a scatter's legend widens the image beyond it as its labels need. */
const PLOT_W = 720;
const H = 440;
const M = { left: 70, right: 24, top: 40, bottom: 56 };
const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];

export function escapeXml(s: string): string {
  return s.replace(/[<>&"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** About `count` round tick values covering [lo, hi]. */
export function niceTicks(lo: number, hi: number, count = 5): number[] {
  if (!(hi > lo)) hi = lo + 1;
  const raw = (hi - lo) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 2.5, 5, 10].find((m) => m * mag >= raw) ?? 10) * mag;
  const ticks: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

const f = (n: number) => (Math.round(n * 10) / 10).toString();

/** How wide a 12 px sans-serif label is, at most (wide glyphs included), so nothing is laid out past the edge. */
export const CHAR_W = 7.2;
export const textWidth = (s: string) => Math.ceil(s.length * CHAR_W);

/** Powers of ten covering [lo, hi] (both > 0): the ticks of a log axis. */
export function decadeTicks(lo: number, hi: number): number[] {
  const out: number[] = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++)
    out.push(Number((10 ** e).toPrecision(12)));
  return out;
}

interface Axes {
  x: (v: number) => number;
  y: (v: number) => number;
  svg: string;
}

function axes(opts: {
  width: number;
  /** extra room right of the plot (legend) */
  right?: number;
  xLo: number;
  xHi: number;
  /** log10 x axis with decade ticks (xLo > 0) */
  xLog?: boolean;
  yLo: number;
  yHi: number;
  xLabel: string;
  yLabel: string;
  xFmt: (v: number) => string;
  yFmt: (v: number) => string;
}): Axes {
  const W = opts.width;
  const right = M.right + (opts.right ?? 0);
  const pw = W - M.left - right;
  const ph = H - M.top - M.bottom;
  const tx = opts.xLog ? Math.log10 : (v: number) => v;
  const [xa, xb] = [tx(opts.xLo), tx(opts.xHi)];
  const x = (v: number) => M.left + ((tx(v) - xa) / (xb - xa || 1)) * pw;
  const y = (v: number) => M.top + ph - ((v - opts.yLo) / (opts.yHi - opts.yLo || 1)) * ph;
  const parts: string[] = [];
  for (const t of niceTicks(opts.yLo, opts.yHi)) {
    if (t < opts.yLo || t > opts.yHi) continue;
    parts.push(
      `<line x1="${M.left}" x2="${W - right}" y1="${f(y(t))}" y2="${f(y(t))}" stroke="#e5e5e5"/>`,
      `<text x="${M.left - 8}" y="${f(y(t) + 4)}" text-anchor="end">${escapeXml(opts.yFmt(t))}</text>`,
    );
  }
  const xTicks = opts.xLog ? decadeTicks(opts.xLo, opts.xHi) : niceTicks(opts.xLo, opts.xHi);
  for (const t of xTicks) {
    if (t < opts.xLo * (1 - 1e-9) || t > opts.xHi * (1 + 1e-9)) continue;
    parts.push(
      `<line x1="${f(x(t))}" x2="${f(x(t))}" y1="${M.top + ph}" y2="${M.top + ph + 5}" stroke="#333"/>`,
      `<text x="${f(x(t))}" y="${M.top + ph + 20}" text-anchor="middle">${escapeXml(opts.xFmt(t))}</text>`,
    );
  }
  parts.push(
    `<line x1="${M.left}" x2="${W - right}" y1="${M.top + ph}" y2="${M.top + ph}" stroke="#333"/>`,
    `<line x1="${M.left}" x2="${M.left}" y1="${M.top}" y2="${M.top + ph}" stroke="#333"/>`,
    `<text x="${M.left + pw / 2}" y="${H - 12}" text-anchor="middle">${escapeXml(opts.xLabel)}</text>`,
    `<text transform="translate(16 ${M.top + ph / 2}) rotate(-90)" text-anchor="middle">${escapeXml(opts.yLabel)}</text>`,
  );
  return { x, y, svg: parts.join("\n") };
}

function frame(title: string, body: string, W = PLOT_W): string {
  return [
    `<?xml version="1.0" encoding="UTF-8"?>`,
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="#fff"/>`,
    `<text x="${W / 2}" y="22" text-anchor="middle" font-size="15" font-weight="bold">${escapeXml(title)}</text>`,
    body,
    "</svg>",
    "",
  ].join("\n");
}

const dollars = (v: number) =>
  Number.isInteger(v)
    ? `$${v}`
    : `$${v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(2) : Number(v.toPrecision(2)).toString()}`;

/** One point of a cost-vs-resolved scatter. */
export interface ScatterPoint {
  label: string;
  /** USD */
  cost: number;
  rate: number;
  ci: { low: number; high: number } | null;
}

/** Costs spanning at least this ratio get a log axis: otherwise the cheap points pile up on $0. */
const LOG_SPAN = 10;

/**
 * The points that no other point beats on both cost and rate (cheaper or as cheap, and resolving more or as much):
 * the cost-vs-resolved frontier, cheapest first.
 */
export function paretoFrontier<T extends { cost: number; rate: number }>(pts: readonly T[]): T[] {
  const sorted = [...pts].sort((a, b) => a.cost - b.cost || b.rate - a.rate);
  const out: T[] = [];
  for (const p of sorted) if (out.length === 0 || p.rate > out[out.length - 1]!.rate) out.push(p);
  return out;
}

/**
 * Resolved rate (y, with its 95% interval) against cost (x), one labelled point per entry, the legend right of
 * the plot and the image as wide as the longest label needs; a log cost axis when costs span a decade or more;
 * with `frontier`, the non-dominated points joined by a line.
 */
export function costScatterSvg(opts: {
  title: string;
  points: readonly ScatterPoint[];
  xLabel: string;
  yLabel: string;
  frontier?: boolean;
}): string {
  const pts = opts.points.map((p, i) => ({ ...p, color: PALETTE[i % PALETTE.length]! }));
  const legend = pts.map((p) => `● ${p.label}`);
  const legendW = Math.max(120, ...legend.map(textWidth)) + 16;
  const width = PLOT_W + legendW;
  const positive = pts.map((p) => p.cost).filter((c) => c > 0);
  const maxCost = Math.max(0, ...positive);
  const minCost = Math.min(...positive);
  const log = positive.length >= 2 && maxCost / minCost >= LOG_SPAN;
  const xLo = log ? 10 ** Math.floor(Math.log10(minCost)) : 0;
  const xHi = log ? 10 ** Math.ceil(Math.log10(maxCost)) : maxCost > 0 ? maxCost * 1.1 : 1;
  const a = axes({
    width,
    right: legendW,
    xLo,
    xHi,
    xLog: log,
    yLo: 0,
    yHi: 1,
    xLabel: `${opts.xLabel}${log ? " (log scale)" : ""}`,
    yLabel: opts.yLabel,
    xFmt: dollars,
    yFmt: (v) => `${Math.round(v * 100)}%`,
  });
  // On a log axis a $0 point sits on the axis's left edge (its tooltip says $0).
  const px = (c: number) => f(a.x(log ? Math.max(c, xLo) : c));
  const marks = pts.map((p, i) => {
    const cx = px(p.cost);
    const bar = p.ci
      ? `<line x1="${cx}" x2="${cx}" y1="${f(a.y(p.ci.low))}" y2="${f(a.y(p.ci.high))}" stroke="${p.color}" stroke-width="1.5"/>`
      : "";
    return [
      bar,
      `<circle cx="${cx}" cy="${f(a.y(p.rate))}" r="5" fill="${p.color}"><title>${escapeXml(
        `${p.label}: ${(p.rate * 100).toFixed(1)}% at ${dollars(p.cost)}`,
      )}</title></circle>`,
      `<text x="${width - legendW + 8}" y="${M.top + 14 + i * 16}" fill="${p.color}">${escapeXml(legend[i]!)}</text>`,
    ].join("\n");
  });
  const front = opts.frontier ? paretoFrontier(pts) : [];
  const line =
    front.length >= 2
      ? `<polyline class="frontier" fill="none" stroke="#555" stroke-dasharray="4 3" points="${front
          .map((p) => `${px(p.cost)},${f(a.y(p.rate))}`)
          .join(" ")}"/>`
      : "";
  const empty =
    pts.length === 0
      ? `<text x="${width / 2}" y="${H / 2}" text-anchor="middle">no scored attempts yet</text>`
      : "";
  return frame(opts.title, `${a.svg}\n${line}\n${marks.join("\n")}${empty}`, width);
}

/** Resolved rate (y, with its 95% CI) against total cost (x), one labelled point per harness × model. */
export function resolvedVsCostSvg(r: Report): string {
  const clustered = r.groups.some((g) => g.resolvedCiMethod === "task-bootstrap");
  return costScatterSvg({
    title: `${r.run}: resolved rate vs cost`,
    points: r.groups
      .filter((g) => g.resolvedRate !== null)
      .map((g) => ({
        label: `${g.harness} / ${g.model}`,
        cost: g.costNanoUsd / 1e9,
        rate: g.resolvedRate!,
        ci: g.resolvedCi95,
      })),
    xLabel: "total cost (USD, ledger)",
    yLabel: `resolved rate (95% ${clustered ? "task-bootstrap" : "Wilson"} CI)`,
  });
}

/** Resolved rate against cost across runs (one point per run × harness × model), the frontier joined. */
export function frontierSvg(reports: readonly Report[]): string {
  return costScatterSvg({
    title: `cost vs resolved across ${reports.map((r) => r.run).join(", ")}`,
    points: reports.flatMap((r) =>
      r.groups
        .filter((g) => g.resolvedRate !== null)
        .map((g) => ({
          label: `${r.run}: ${g.harness} / ${g.model}`,
          cost: g.costNanoUsd / 1e9,
          rate: g.resolvedRate!,
          ci: g.resolvedCi95,
        })),
    ),
    xLabel: "total cost (USD, ledger)",
    yLabel: "resolved rate (95% CI)",
    frontier: true,
  });
}

/** The time unit a span reads best in: seconds under two minutes, hours past two hours, else minutes. */
export function timeUnit(spanMs: number): { name: string; ms: number } {
  if (spanMs < 120_000) return { name: "seconds", ms: 1_000 };
  if (spanMs >= 7_200_000) return { name: "hours", ms: 3_600_000 };
  return { name: "minutes", ms: 60_000 };
}

/** Cumulative ledger spend (total and billable) against time since the run's first call. */
export function spendOverTimeSvg(r: Report): string {
  const s = r.spendOverTime;
  const t0 = s[0]?.atMs ?? 0;
  const pts = [{ atMs: t0, totalNanoUsd: 0, billableNanoUsd: 0 }, ...s];
  const unit = timeUnit(pts[pts.length - 1]!.atMs - t0);
  const since = (ms: number) => (ms - t0) / unit.ms;
  const xHi = Math.max(since(pts[pts.length - 1]!.atMs), unit.name === "seconds" ? 1 : 1 / 60);
  const yHi = Math.max(...pts.map((p) => p.totalNanoUsd / 1e9), 0);
  const a = axes({
    width: PLOT_W,
    xLo: 0,
    xHi,
    yLo: 0,
    yHi: yHi > 0 ? yHi * 1.1 : 1,
    xLabel: `${unit.name} since the first call`,
    yLabel: "cumulative spend (USD)",
    xFmt: (v) => (Number.isInteger(v) ? String(v) : v.toFixed(1)),
    yFmt: dollars,
  });
  const line = (pick: (p: (typeof pts)[number]) => number, color: string, dash: string) =>
    `<polyline fill="none" stroke="${color}" stroke-width="2"${dash} points="${pts
      .map((p) => `${f(a.x(since(p.atMs)))},${f(a.y(pick(p) / 1e9))}`)
      .join(" ")}"/>`;
  const body = [
    a.svg,
    line((p) => p.totalNanoUsd, PALETTE[0]!, ""),
    line((p) => p.billableNanoUsd, PALETTE[1]!, ' stroke-dasharray="6 4"'),
    `<text x="${M.left + 10}" y="${M.top + 14}" fill="${PALETTE[0]}">— total (retried attempts included)</text>`,
    `<text x="${M.left + 10}" y="${M.top + 30}" fill="${PALETTE[1]}">- - billable</text>`,
    s.length === 0
      ? `<text x="${PLOT_W / 2}" y="${H / 2}" text-anchor="middle">no ledger calls yet</text>`
      : "",
  ].join("\n");
  return frame(`${r.run}: spend over time`, body);
}
