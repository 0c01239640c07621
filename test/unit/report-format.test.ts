import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { buildReport } from "../../report/aggregate.js";
import { csvField, formatCsv, formatJson, formatTable } from "../../report/format.js";
import { sampleInput } from "./report-fixtures.js";

/** A minimal RFC 4180 parser: enough to read back what formatCsv writes. */
function parseCsv(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let field = "";
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (quoted) {
      if (ch === '"' && text[i + 1] === '"') {
        field += '"';
        i++;
      } else if (ch === '"') quoted = false;
      else field += ch;
    } else if (ch === '"') quoted = true;
    else if (ch === ",") {
      row.push(field);
      field = "";
    } else if (ch === "\r" && text[i + 1] === "\n") {
      row.push(field);
      rows.push(row);
      row = [];
      field = "";
      i++;
    } else field += ch;
  }
  return rows;
}

describe("report formats", () => {
  const report = buildReport(sampleInput());

  it("csv: one header and one row per group, exact USD, quoting round-trips", () => {
    const rows = parseCsv(formatCsv(report));
    assert.equal(rows.length, 1 + report.groups.length);
    const header = rows[0]!;
    const h1 = Object.fromEntries(header.map((h, i) => [h, rows[1]![i]]));
    assert.equal(h1.harness, "h1");
    assert.equal(h1.cost_usd, "4.000000000");
    assert.equal(h1.billable_usd, "3.000000000");
    assert.equal(h1.retried_spend_usd, "0.500000000");
    assert.equal(h1.resolved, "3");
    assert.equal(h1.pass_at_k, "1");
    assert.equal(h1.error_classes, "tests_failed:1");
    assert.equal(csvField('a,"b"\nc'), '"a,""b""\nc"');
    const tricky = buildReport({
      ...sampleInput(),
      attempts: sampleInput().attempts.map((a) => ({ ...a, harness: 'x,"y"' })),
      ledger: [],
    });
    assert.equal(parseCsv(formatCsv(tricky))[1]![0], 'x,"y"');
  });

  it("json: parses back to the same report", () => {
    assert.deepEqual(JSON.parse(formatJson(report)), report);
  });

  it("table: names every group and the totals line", () => {
    const t = formatTable(report);
    assert.match(
      t,
      /^Run r1: 7 cells, 9 attempts, 3\/5 resolved; spent \$5\.0000 \(billable \$3\.0000, on retried attempts \$0\.5000\)/,
    );
    assert.match(t, /h1\s+m1\s+5\s+7\s+3\/4 75\.0% \[/);
    assert.match(t, /Cost per phase:/);
  });
});
