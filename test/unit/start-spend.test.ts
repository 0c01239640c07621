import assert from "node:assert/strict";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { seedSummary, spendNotice } from "../../cli/commands/start.js";
import { localUpstreams } from "../../local/providers.js";

test("npm start says what it may spend before it runs", () => {
  assert.equal(spendNotice({}, 32, false, []), "Model calls go to the scripted provider: nothing is billed.");
  assert.match(
    spendNotice({}, 32, false, ["anthropic"]),
    /scripted provider: nothing is billed\. \(anthropic keys are set but unused; pass --real-providers/,
  );
  assert.equal(
    spendNotice({ budget_usd: 5, max_cost_usd: 0.5 }, 32, true, ["anthropic"]),
    "Model calls go to the real providers (anthropic): this run may spend at most $5.0000 (budget_usd, enforced by the gateway).",
  );
  assert.match(
    spendNotice({ max_cost_usd: 0.5 }, 32, true, ["openai"]),
    /at most \$16\.0000 \(no budget_usd: max_cost_usd \$0\.5000 × 32 cells/,
  );
});

test("with keys set but no --real-providers, the plane's upstream is the scripted provider, and it says so", async () => {
  const mirrors = await mkdtemp(join(tmpdir(), "ef-mirrors-"));
  // startLocalPlane passes the real upstreams only when asked; here: none given, the anthropic key named as set
  const up = await localUpstreams("examples/tasks", {}, mirrors, ["anthropic"]);
  try {
    assert.equal(up.kind, "scripted");
    assert.match(up.describe, /anthropic keys are set but unused: pass --real-providers/);
  } finally {
    await up.scripted?.close();
  }
  const real = await localUpstreams(
    "examples/tasks",
    { anthropic: { provider: "anthropic", baseUrl: "https://api.anthropic.com", apiKey: "sk-ant-x" } },
    mirrors,
    ["anthropic"],
  );
  assert.equal(real.kind, "real");
  assert.equal(real.upstreams.anthropic?.apiKey, "sk-ant-x");
});

test("the seed's summary lines: total, billable against the cap, the seed's counters, the first five errors", () => {
  const errors = Array.from(
    { length: 7 },
    (_, i) => `h__m__t${i}__r0: Budget cap reached ($0.0000 remaining < $0.5000 estimated)`,
  );
  const out = seedSummary(
    { totalNanoUsd: 1_234_500_000, billableNanoUsd: 1_000_000_000 },
    { budgetNanoUsd: 5_000_000_000, errors, seed: { completed: 3, failed: 1, skipped: 7 } },
  );
  const lines = out.split("\n");
  assert.equal(lines[0], "Total cost (informational, includes budget-exempt cells): $1.2345");
  assert.equal(lines[1], "Billable cost: $1.0000 / $5.0000 budget cap");
  assert.equal(lines[2], "Completed: 3  Failed: 1  Skipped: 7");
  assert.equal(lines[3], "Errors (first 5 shown):");
  assert.equal(lines.length, 4 + 5);
  // calls whose answer reached nobody: said apart, after the seed's two lines
  const est = seedSummary(
    {
      totalNanoUsd: 2_000_000_000,
      billableNanoUsd: 2_000_000_000,
      estimatedNanoUsd: 51_000_000,
      estimatedCalls: 2,
    },
    { budgetNanoUsd: 5_000_000_000 },
  ).split("\n");
  assert.equal(est[1], "Billable cost: $2.0000 / $5.0000 budget cap");
  assert.match(
    est[2] ?? "",
    /^ {2}of which estimated: \$0\.0510 for 2 call\(s\) whose answer reached nobody/,
  );
  // no budget_usd: no billable line
  assert.doesNotMatch(
    seedSummary({ totalNanoUsd: 1, billableNanoUsd: 1 }, { budgetNanoUsd: null }),
    /Billable/,
  );
});
