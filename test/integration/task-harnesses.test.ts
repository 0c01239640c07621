import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { claudeFixScenario, opencodeFixScenario } from "../../scripted-provider/fixes.js";
import { codexShellScenario } from "../../scripted-provider/index.js";
import { forSuite } from "../helpers/suite.js";
import { FIXED_CALC, startTaskRig, THREE_WRITE_FIX } from "./task-fixture.js";

/**
 * opencode from npm, installed by the test into a cache folder the first time (it is not an evalfleet dependency:
 * its platform packages do not all resolve in a lock file). OPENCODE_BIN points at another build.
 */
async function opencodeBin(): Promise<string> {
  if (process.env.OPENCODE_BIN) return process.env.OPENCODE_BIN;
  const prefix = join(tmpdir(), `evalfleet-opencode-${OPENCODE_VERSION}`);
  const bin = join(prefix, "node_modules/.bin/opencode");
  if (!existsSync(bin))
    execFileSync(
      "npm",
      [
        "install",
        "--prefix",
        prefix,
        "--no-save",
        "--no-audit",
        "--no-fund",
        `opencode-ai@${OPENCODE_VERSION}`,
      ],
      {
        stdio: "ignore",
        timeout: 240_000,
      },
    );
  return bin;
}
const OPENCODE_VERSION = "1.18.33";
process.env.OPENCODE_BIN ?? join(import.meta.dirname, "../../node_modules/.bin/opencode");

const claudeRun = (name: string, extra: Record<string, unknown> = {}) => ({
  name,
  harnesses: [{ name: "claude-code", adapter: "claude-code" as const }],
  models: [{ name: "claude-sonnet-4-5", provider: "anthropic" as const }],
  max_turns: 10,
  timeout_seconds: 90,
  ...extra,
});

describe("harness task with real CLI harnesses", { timeout: 115_000 }, () => {
  const rig = forSuite(startTaskRig, (r) => r.close());

  test("Claude Code writes the scripted fix: PATCH_READY with its stream-json trajectory and own cost", async () => {
    const cell = await rig().plan(claudeRun("cc-task"));
    rig().provider.setScenario(claudeFixScenario({ files: [{ path: "calc.js", content: FIXED_CALC }] }));
    const r = await rig().run("cc-task", cell);
    assert.equal(
      r.status,
      "PATCH_READY",
      `${r.errorMessage}\n${r.stdout.slice(-3000)}\n${r.stderr.slice(-3000)}`,
    );
    assert.ok(r.usage.calls >= 2 && r.usage.inputTokens > 0 && r.usage.outputTokens > 0);
    assert.equal(r.usage.costNanoUsd, rig().provider.bill().total.costNanoUsd);
    const patch = (await rig().patch(r)) ?? "";
    assert.match(patch, /^diff --git a\/calc\.js b\/calc\.js/m);
    assert.match(patch, /^\+ {2}return a \+ b;$/m);
    assert.ok(r.numToolCalls >= 1, `tool calls ${r.numToolCalls}`);
    assert.ok(r.harnessReportedCostNanoUsd !== null, "Claude Code's own cost estimate is kept");
    const traj = (await rig().blob(r.trajectoryRef!)) ?? "";
    assert.match(traj, /"source":"harness"/);
    assert.ok(
      rig()
        .provider.calls()
        .every((c) => c.key === "sk-run-task-0123456789abcdef"),
    );
    assert.equal((await rig().published("cc-task", cell)).status, "PATCH_READY");
  });

  test("Claude Code over a low budget is stopped: BUDGET_EXCEEDED with the partial patch", async () => {
    const cell = await rig().plan(claudeRun("cc-budget", { max_cost_usd: 1.5 }));
    // 200k input tokens at $3/Mtok = $0.60 a call: $1.50 pays for Read + Write of calc.js; the third call ends it.
    rig().provider.setScenario(claudeFixScenario(THREE_WRITE_FIX));
    const r = await rig().run("cc-budget", cell);
    assert.equal(r.status, "BUDGET_EXCEEDED", `${r.errorMessage}\n${r.stderr.slice(-2000)}`);
    const patch = (await rig().patch(r)) ?? "";
    assert.match(patch, /\+ {2}return a \+ b;/);
    assert.ok(!patch.includes("MORE.md"));
  });

  test("Codex CLI writes the scripted fix over the Responses API: PATCH_READY", async () => {
    const cell = await rig().plan({
      name: "cx-task",
      harnesses: [{ name: "codex", adapter: "codex" }],
      models: [{ name: "gpt-5-codex", provider: "openai" }],
      max_turns: 10,
      timeout_seconds: 90,
    });
    rig().provider.setScenario(codexShellScenario({ files: [{ path: "calc.js", content: FIXED_CALC }] }));
    const before = rig().provider.bill().total;
    const r = await rig().run("cx-task", cell);
    assert.equal(
      r.status,
      "PATCH_READY",
      `${r.errorMessage}\n${r.stdout.slice(-2000)}\n${r.stderr.slice(-2000)}`,
    );
    assert.equal(r.usage.costNanoUsd, rig().provider.bill().total.costNanoUsd - before.costNanoUsd);
    assert.match((await rig().patch(r)) ?? "", /^\+ {2}return a \+ b;$/m);
  });

  test("opencode writes the scripted fix through its bash tool: PATCH_READY", async () => {
    const cell = await rig().plan({
      name: "oc-task",
      harnesses: [{ name: "opencode", adapter: "opencode", settings: { bin: await opencodeBin() } }],
      models: [{ name: "gpt-5-mini", provider: "openai" }],
      max_turns: 10,
      timeout_seconds: 90,
    });
    rig().provider.setScenario(opencodeFixScenario({ files: [{ path: "calc.js", content: FIXED_CALC }] }));
    const r = await rig().run("oc-task", cell);
    assert.equal(r.status, "PATCH_READY", `${r.errorMessage}\n${r.stderr.slice(-2000)}`);
    assert.ok(r.usage.calls >= 2 && r.numToolCalls >= 1);
    assert.match((await rig().patch(r)) ?? "", /^\+ {2}return a \+ b;$/m);
  });
});
