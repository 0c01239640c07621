import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { buildReport } from "../../report/aggregate.js";
import {
  CHAR_W,
  decadeTicks,
  escapeXml,
  frontierSvg,
  niceTicks,
  paretoFrontier,
  resolvedVsCostSvg,
  spendOverTimeSvg,
} from "../../report/svg.js";
import type { ReportInput } from "../../report/types.js";
import { attempt, ledger, sampleInput } from "./report-fixtures.js";

const svgWidth = (svg: string) => Number(/<svg [^>]*width="(\d+(?:\.\d+)?)"/.exec(svg)?.[1]);
const decode = (s: string) => s.replace(/&#(\d+);/g, (_, n: string) => String.fromCharCode(Number(n)));
/** Every left-anchored label: where it starts and its text. */
const startLabels = (svg: string) =>
  [...svg.matchAll(/<text x="([\d.]+)" y="[\d.]+"(?: fill="[^"]*")?>([^<]*)<\/text>/g)].map((m) => ({
    x: Number(m[1]),
    text: decode(m[2]!),
  }));
const circles = (svg: string) => [...svg.matchAll(/<circle cx="([\d.]+)"/g)].map((m) => Number(m[1]));
const xTickLabels = (svg: string) =>
  [...svg.matchAll(/<text x="[\d.]+" y="[\d.]+" text-anchor="middle">([^<]*)<\/text>/g)].map((m) =>
    decode(m[1]!),
  );

/** Two groups: a cheap reference agent and an expensive CLI harness, with real-world names. */
function cheapAndDear(): ReportInput {
  const mk = (harness: string, model: string, id: string) =>
    attempt({ cellId: `${harness}__${model}__t1__r0`, harness, model, taskId: id });
  return {
    run: "plots",
    attempts: [
      mk("reference", "claude-sonnet-4-5", "t1"),
      mk("claude-code", "claude-sonnet-4-5-20250929", "t1"),
    ],
    ledger: [
      ledger({ harness: "reference", model: "claude-sonnet-4-5", totalNanoUsd: 10_000_000 }),
      ledger({ harness: "claude-code", model: "claude-sonnet-4-5-20250929", totalNanoUsd: 2_000_000_000 }),
    ],
    phases: [],
    spend: [],
    generatedAt: "x",
  };
}

const spanning = (ms: number): ReportInput => ({
  ...sampleInput(),
  spend: [
    { atMs: 1_000, totalNanoUsd: 1, billableNanoUsd: 1 },
    { atMs: 1_000 + ms, totalNanoUsd: 2, billableNanoUsd: 2 },
  ],
});

/**
 * Well-formedness without an XML library: one root, every element closed in order, attributes quoted, no raw `<`
 * or stray `&` in text.
 */
function assertWellFormedXml(xml: string): void {
  const body = xml.replace(/^<\?xml[^?]*\?>\s*/, "");
  const stack: string[] = [];
  let roots = 0;
  const re =
    /<(\/?)([A-Za-z][\w:-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>|<|&(?!#\d+;|amp;|lt;|gt;|quot;|apos;)/g;
  let m: RegExpExecArray | null;
  let last = 0;
  for (m = re.exec(body); m !== null; m = re.exec(body)) {
    if (!m[2]) assert.fail(`stray ${m[0]} at ${m.index}: ${body.slice(m.index, m.index + 40)}`);
    if (stack.length === 0 && body.slice(last, m.index).trim() !== "") assert.fail("text outside the root");
    last = re.lastIndex;
    const [, closing, name, , selfClosing] = m;
    if (closing) assert.equal(stack.pop(), name, `</${name}> closes the wrong element`);
    else if (!selfClosing) {
      if (stack.length === 0) roots++;
      stack.push(name!);
    } else if (stack.length === 0) roots++;
  }
  assert.deepEqual(stack, [], "unclosed elements");
  assert.equal(roots, 1);
}

describe("SVG plots", () => {
  const report = buildReport(sampleInput());

  it("resolved rate vs cost: well-formed, a point and an error bar per scored group, labels escaped", () => {
    const input = sampleInput();
    const svg = resolvedVsCostSvg(
      buildReport({
        ...input,
        attempts: input.attempts.map((a) => ({ ...a, model: a.model === "m1" ? "m<1>&" : a.model })),
      }),
    );
    assertWellFormedXml(svg);
    assert.match(svg, /^<\?xml/);
    assert.match(svg, /<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
    assert.equal((svg.match(/<circle /g) ?? []).length, 2);
    assert.ok(svg.includes("m&#60;1&#62;&#38;"));
    assertWellFormedXml(resolvedVsCostSvg(report));
  });

  it("spend over time: well-formed, two polylines, empty run still renders", () => {
    const svg = spendOverTimeSvg(report);
    assertWellFormedXml(svg);
    assert.equal((svg.match(/<polyline /g) ?? []).length, 2);
    const empty = buildReport({ ...sampleInput(), spend: [], attempts: [], ledger: [] });
    assertWellFormedXml(spendOverTimeSvg(empty));
    assertWellFormedXml(resolvedVsCostSvg(empty));
  });

  it("no label runs past the image's right edge (the legend of long harness / model names included)", () => {
    for (const svg of [
      resolvedVsCostSvg(buildReport(cheapAndDear())),
      frontierSvg([buildReport(cheapAndDear()), buildReport({ ...cheapAndDear(), run: "another-run-name" })]),
    ]) {
      const width = svgWidth(svg);
      const labels = startLabels(svg);
      assert.ok(labels.some((l) => l.text.includes("claude-code / claude-sonnet-4-5-20250929")));
      for (const l of labels)
        assert.ok(l.x + l.text.length * CHAR_W <= width, `"${l.text}" at x=${l.x} runs past ${width}`);
    }
  });

  it("costs spanning orders of magnitude get a log axis with decade ticks; the cheap point is not piled on $0", () => {
    const svg = resolvedVsCostSvg(buildReport(cheapAndDear()));
    assert.match(svg, /total cost \(USD, ledger\) \(log scale\)/);
    const ticks = xTickLabels(svg);
    for (const t of ["$0.01", "$0.1", "$1", "$10"]) assert.ok(ticks.includes(t), ticks.join(" "));
    const [cheap, dear] = circles(svg).sort((x, y) => x - y);
    const plot = 720 - 70 - 24;
    assert.ok(dear! - cheap! > plot * 0.5, `cheap at ${cheap}, dear at ${dear}: apart by half the plot`);
    // Costs within one decade stay on a linear axis from $0.
    const near = cheapAndDear();
    near.ledger = near.ledger.map((l) => ({
      ...l,
      totalNanoUsd: l.totalNanoUsd === 10_000_000 ? 1_000_000_000 : l.totalNanoUsd,
    }));
    const lin = resolvedVsCostSvg(buildReport(near));
    assert.doesNotMatch(lin, /log scale/);
    assert.ok(xTickLabels(lin).includes("$0"));
  });

  it("spend over time: the axis label names the unit its ticks are in", () => {
    const short = spendOverTimeSvg(buildReport(spanning(90_000)));
    assert.match(short, />seconds since the first call</);
    const ticks = xTickLabels(short).filter((t) => !t.includes("since"));
    assert.ok(ticks.includes("60") && ticks.every((t) => /^\d+(\.\d)?$/.test(t)), ticks.join(" "));
    assert.match(spendOverTimeSvg(buildReport(spanning(30 * 60_000))), />minutes since the first call</);
    assert.match(spendOverTimeSvg(buildReport(spanning(5 * 3_600_000))), />hours since the first call</);
  });

  it("the frontier joins the points no other beats on both cost and rate", () => {
    const pts = [
      { cost: 1, rate: 0.2 },
      { cost: 2, rate: 0.1 },
      { cost: 3, rate: 0.5 },
      { cost: 3, rate: 0.4 },
      { cost: 9, rate: 0.5 },
    ];
    assert.deepEqual(paretoFrontier(pts), [pts[0], pts[2]]);
    const input = cheapAndDear();
    // The cheap arm resolves nothing, so the dear one is on the frontier too.
    input.attempts = input.attempts.map((x) =>
      x.harness === "reference" ? { ...x, resolved: false, success: 0, gradeStatus: "NO" } : x,
    );
    const svg = frontierSvg([buildReport(input)]);
    assertWellFormedXml(svg);
    assert.equal((svg.match(/class="frontier"/g) ?? []).length, 1);
  });

  it("helpers", () => {
    assert.deepEqual(decadeTicks(0.01, 10), [0.01, 0.1, 1, 10]);
    assert.equal(escapeXml(`<a href="x">&'`), "&#60;a href=&#34;x&#34;&#62;&#38;&#39;");
    assert.deepEqual(niceTicks(0, 1), [0, 0.2, 0.4, 0.6, 0.8, 1]);
    assert.deepEqual(niceTicks(0, 4.4), [0, 1, 2, 3, 4]);
  });
});
