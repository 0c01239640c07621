import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, test } from "node:test";
import { referenceFixScenario } from "../../scripted-provider/fixes.js";
import { attemptDirs } from "../../task/index.js";
import { forSuite } from "../helpers/suite.js";
import { FIXED_CALC, startTaskRig, THREE_WRITE_FIX } from "./task-fixture.js";

describe("harness task with the reference agent", { timeout: 110_000 }, () => {
  const rig = forSuite(startTaskRig, (r) => r.close());

  test("the scripted fix lands as PATCH_READY: patch blob, trajectory, usage, one AttemptResult", async () => {
    const cell = await rig().plan({ name: "ref-ok", max_turns: 10, max_cost_usd: 1 });
    rig().provider.setScenario(referenceFixScenario({ files: [{ path: "calc.js", content: FIXED_CALC }] }));
    const r = await rig().run("ref-ok", cell);
    assert.equal(r.status, "PATCH_READY", `${r.errorMessage}\n${r.stderr}`);
    assert.equal(r.exitCode, 0);
    assert.ok(r.usage.calls >= 3 && r.usage.inputTokens > 0 && r.usage.outputTokens > 0);
    assert.equal(r.usage.costNanoUsd, rig().provider.bill().total.costNanoUsd);
    assert.ok(r.numToolCalls >= 3, `tool calls: ${r.numToolCalls}`);
    assert.equal(r.patchRef, null, "a small patch travels inline in the result");
    const patch = await rig().patch(r);
    assert.match(patch ?? "", /^diff --git a\/calc\.js b\/calc\.js/m);
    assert.match(patch ?? "", /^\+ {2}return a \+ b;$/m);
    assert.match(r.patchHash ?? "", /^[0-9a-f]{64}$/);
    const traj = (await rig().blob(r.trajectoryRef!)) ?? "";
    const lines = traj
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as { source: string });
    assert.equal(lines.filter((l) => l.source === "shim").length, r.usage.calls);
    assert.ok(lines.some((l) => l.source === "harness"));
    assert.ok(!traj.includes("sk-run-task"), "the run key never reaches the trajectory");
    // The harness sent the dummy key; the provider only ever saw the run key.
    assert.ok(
      rig()
        .provider.calls()
        .every((c) => c.key === "sk-run-task-0123456789abcdef"),
    );
    assert.deepEqual(await rig().published("ref-ok", cell), r);
    // The attempt's folder is gone after publishing.
    assert.ok(!existsSync(attemptDirs(rig().workRoot, { run: "ref-ok", cell, attempt: 1 }).attemptDir));
  });

  test("a re-run starts clean: leftovers of an earlier attempt are removed, the base is the same", async () => {
    const cell = await rig().plan({ name: "ref-rerun", max_turns: 10 });
    const earlier = attemptDirs(rig().workRoot, { run: "ref-rerun", cell, attempt: 1 });
    await mkdir(earlier.repo, { recursive: true });
    await writeFile(join(earlier.repo, "stale.txt"), "from attempt 1\n");
    rig().provider.setScenario(referenceFixScenario({ files: [{ path: "calc.js", content: FIXED_CALC }] }));
    const r = await rig().run("ref-rerun", cell, 2, { keepWorkdir: true });
    assert.equal(r.status, "PATCH_READY", r.errorMessage ?? "");
    assert.ok(!existsSync(earlier.attemptDir), "attempt 1's folder was removed");
    const patch = (await rig().patch(r)) ?? "";
    assert.ok(!patch.includes("stale.txt"));
    assert.equal(patch.match(/^diff --git/gm)?.length, 1);
  });

  test("a low budget ends the session as BUDGET_EXCEEDED and keeps the partial patch", async () => {
    // 200k input tokens at $1/Mtok = $0.20 a call: $0.50 pays for read + write calc.js, not the third call.
    const cell = await rig().plan({
      name: "ref-budget",
      max_turns: 10,
      max_cost_usd: 0.5,
      models: [{ name: "gpt-5-mini", provider: "openai", prices: { input_per_mtok: 1, output_per_mtok: 1 } }],
    });
    rig().provider.setScenario(referenceFixScenario(THREE_WRITE_FIX));
    const before = rig().provider.bill().total;
    const r = await rig().run("ref-budget", cell);
    assert.equal(r.status, "BUDGET_EXCEEDED", `${r.errorMessage}\n${r.stdout}\n${r.stderr}`);
    assert.ok(r.usage.costNanoUsd >= 400_000_000, `cost ${r.usage.costNanoUsd}`);
    // The provider bills at its list price, the shim at the run's config price: compare what was served.
    assert.equal(r.usage.inputTokens, rig().provider.bill().total.inputTokens - before.inputTokens);
    const patch = (await rig().patch(r)) ?? "";
    assert.match(patch, /\+ {2}return a \+ b;/);
    assert.ok(!patch.includes("MORE.md"));
    assert.equal((await rig().published("ref-budget", cell)).status, "BUDGET_EXCEEDED");
  });

  test("a turn cap below the agent's needs ends as MAX_TURNS_EXCEEDED", async () => {
    const cell = await rig().plan({ name: "ref-turns", max_turns: 2 });
    rig().provider.setScenario(referenceFixScenario({ files: [{ path: "calc.js", content: FIXED_CALC }] }));
    const r = await rig().run("ref-turns", cell);
    assert.equal(r.status, "MAX_TURNS_EXCEEDED", r.errorMessage ?? "");
    assert.ok(r.usage.calls >= 2);
  });

  test("a multi_phase task runs its phases in order, each with its own trace id, model and shim", async () => {
    const task = {
      id: "mp-calc",
      track: "multi_phase",
      repo_path: "repos/calc",
      problem_statement: "Fix `add` in calc.js: add(2, 3) returns -1 instead of 5.",
      phases: [
        { name: "implement", model_role: "implementation" },
        { name: "review", model_role: "review", prompt: "Check the fix." },
      ],
    };
    const cell = await rig().plan(
      {
        name: "ref-phases",
        max_turns: 20,
        max_cost_usd: 1,
        models: [
          { name: "gpt-5-mini", provider: "openai" },
          { name: "claude-haiku-4-5", provider: "anthropic", role: "review" },
        ],
      },
      task,
    );
    rig().provider.setScenario(referenceFixScenario({ files: [{ path: "calc.js", content: FIXED_CALC }] }));
    const seen = rig().provider.calls().length;
    const r = await rig().run("ref-phases", cell);
    assert.equal(r.status, "PATCH_READY", r.errorMessage ?? "");
    assert.deepEqual(
      r.phases.map((p) => [p.name, p.traceId, p.model, p.modelRole]),
      [
        ["implement", `${cell}__phase-implement`, "gpt-5-mini", "implementation"],
        ["review", `${cell}__phase-review`, "claude-haiku-4-5", "review"],
      ],
    );
    assert.ok(r.phases.every((p) => p.usage.calls >= 3 && p.exitCode === 0));
    assert.equal(r.usage.costNanoUsd, r.phases[0]!.usage.costNanoUsd + r.phases[1]!.usage.costNanoUsd);
    assert.equal(r.usage.calls, r.phases[0]!.usage.calls + r.phases[1]!.usage.calls);
    const models = rig()
      .provider.calls()
      .slice(seen)
      .map((c) => c.model);
    assert.ok(models.includes("gpt-5-mini") && models.includes("claude-haiku-4-5"));
    const review = rig()
      .provider.calls()
      .slice(seen)
      .find((c) => c.model === "claude-haiku-4-5");
    assert.match(JSON.stringify(review?.body), /Check the fix\./);
    assert.match(r.stdout, /--- phase implement ---[\s\S]*--- phase review ---/);
    const traj = (await rig().blob(r.trajectoryRef!)) ?? "";
    assert.match(traj, /"traceId":"[^"]*__phase-review"/);
  });
});
