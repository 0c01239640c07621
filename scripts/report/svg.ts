import type { Report } from "./types.js";

/*
 * Two plots as standalone SVG, drawn by hand (no plotting dependency): resolved rate against cost per
 * harness × model (with the 95% Wilson interval as an error bar), and cumulative spend over time.
 */

const W = 720;
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

interface Axes {
  x: (v: number) => number;
  y: (v: number) => number;
  svg: string;
}

function axes(opts: {
  /** extra room right of the plot (legend) */
  right?: number;
  xLo: number;
  xHi: number;
  yLo: number;
  yHi: number;
  xLabel: string;
  yLabel: string;
  xFmt: (v: number) => string;
  yFmt: (v: number) => string;
}): Axes {
  const right = M.right + (opts.right ?? 0);
  const pw = W - M.left - right;
  const ph = H - M.top - M.bottom;
  const x = (v: number) => M.left + ((v - opts.xLo) / (opts.xHi - opts.xLo || 1)) * pw;
  const y = (v: number) => M.top + ph - ((v - opts.yLo) / (opts.yHi - opts.yLo || 1)) * ph;
  const parts: string[] = [];
  for (const t of niceTicks(opts.yLo, opts.yHi)) {
    if (t < opts.yLo || t > opts.yHi) continue;
    parts.push(
      `<line x1="${M.left}" x2="${W - right}" y1="${f(y(t))}" y2="${f(y(t))}" stroke="#e5e5e5"/>`,
      `<text x="${M.left - 8}" y="${f(y(t) + 4)}" text-anchor="end">${escapeXml(opts.yFmt(t))}</text>`,
    );
  }
  for (const t of niceTicks(opts.xLo, opts.xHi)) {
    if (t < opts.xLo || t > opts.xHi) continue;
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

function frame(title: string, body: string): string {
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
  v === 0 ? "$0" : `$${v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(2) : v.toPrecision(2)}`;
/** The scatter's legend sits right of the plot, so it never covers a point. */
const LEGEND_W = 190;

/** Resolved rate (y, with its 95% CI) against total cost (x), one labelled point per harness × model. */
export function resolvedVsCostSvg(r: Report): string {
  const pts = r.groups
    .filter((g) => g.resolvedRate !== null)
    .map((g, i) => ({
      label: `${g.harness} / ${g.model}`,
      cost: g.costNanoUsd / 1e9,
      rate: g.resolvedRate!,
      ci: g.resolvedCi95,
      color: PALETTE[i % PALETTE.length]!,
    }));
  const maxCost = Math.max(0, ...pts.map((p) => p.cost));
  const a = axes({
    right: LEGEND_W,
    xLo: 0,
    xHi: maxCost > 0 ? maxCost * 1.1 : 1,
    yLo: 0,
    yHi: 1,
    xLabel: "total cost (USD, ledger)",
    yLabel: "resolved rate (95% Wilson CI)",
    xFmt: dollars,
    yFmt: (v) => `${Math.round(v * 100)}%`,
  });
  const marks = pts.map((p, i) => {
    const cx = f(a.x(p.cost));
    const bar = p.ci
      ? `<line x1="${cx}" x2="${cx}" y1="${f(a.y(p.ci.low))}" y2="${f(a.y(p.ci.high))}" stroke="${p.color}" stroke-width="1.5"/>`
      : "";
    return [
      bar,
      `<circle cx="${cx}" cy="${f(a.y(p.rate))}" r="5" fill="${p.color}"><title>${escapeXml(
        `${p.label}: ${(p.rate * 100).toFixed(1)}% at ${dollars(p.cost)}`,
      )}</title></circle>`,
      `<text x="${W - LEGEND_W + 4}" y="${M.top + 14 + i * 16}" fill="${p.color}">● ${escapeXml(p.label)}</text>`,
    ].join("\n");
  });
  const empty =
    pts.length === 0
      ? `<text x="${W / 2}" y="${H / 2}" text-anchor="middle">no scored attempts yet</text>`
      : "";
  return frame(`${r.run}: resolved rate vs cost`, `${a.svg}\n${marks.join("\n")}${empty}`);
}

/** Cumulative ledger spend (total and billable) against minutes since the run's first call. */
export function spendOverTimeSvg(r: Report): string {
  const s = r.spendOverTime;
  const t0 = s[0]?.atMs ?? 0;
  const pts = [{ atMs: t0, totalNanoUsd: 0, billableNanoUsd: 0 }, ...s];
  const minutes = (ms: number) => (ms - t0) / 60_000;
  const xHi = Math.max(minutes(pts[pts.length - 1]!.atMs), 1 / 60);
  const yHi = Math.max(...pts.map((p) => p.totalNanoUsd / 1e9), 0);
  const a = axes({
    xLo: 0,
    xHi,
    yLo: 0,
    yHi: yHi > 0 ? yHi * 1.1 : 1,
    xLabel: "minutes since the first call",
    yLabel: "cumulative spend (USD)",
    xFmt: (v) => (xHi < 2 ? `${(v * 60).toFixed(0)}s` : v.toFixed(v < 10 ? 1 : 0)),
    yFmt: dollars,
  });
  const line = (pick: (p: (typeof pts)[number]) => number, color: string, dash: string) =>
    `<polyline fill="none" stroke="${color}" stroke-width="2"${dash} points="${pts
      .map((p) => `${f(a.x(minutes(p.atMs)))},${f(a.y(pick(p) / 1e9))}`)
      .join(" ")}"/>`;
  const body = [
    a.svg,
    line((p) => p.totalNanoUsd, PALETTE[0]!, ""),
    line((p) => p.billableNanoUsd, PALETTE[1]!, ' stroke-dasharray="6 4"'),
    `<text x="${M.left + 10}" y="${M.top + 14}" fill="${PALETTE[0]}">— total (retried attempts included)</text>`,
    `<text x="${M.left + 10}" y="${M.top + 30}" fill="${PALETTE[1]}">- - billable</text>`,
    s.length === 0 ? `<text x="${W / 2}" y="${H / 2}" text-anchor="middle">no ledger calls yet</text>` : "",
  ].join("\n");
  return frame(`${r.run}: spend over time`, body);
}
