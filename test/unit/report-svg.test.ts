import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { buildReport } from "../../scripts/report/aggregate.js";
import { escapeXml, niceTicks, resolvedVsCostSvg, spendOverTimeSvg } from "../../scripts/report/svg.js";
import { sampleInput } from "./report-fixtures.js";

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

  it("helpers", () => {
    assert.equal(escapeXml(`<a href="x">&'`), "&#60;a href=&#34;x&#34;&#62;&#38;&#39;");
    assert.deepEqual(niceTicks(0, 1), [0, 0.2, 0.4, 0.6, 0.8, 1]);
    assert.deepEqual(niceTicks(0, 4.4), [0, 1, 2, 3, 4]);
  });
});
