import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { Subjects } from "../../protocol/subjects.js";
import { claudeWriteScenario, codexShellScenario } from "../../scripted-provider/index.js";
import type { CapEvent } from "../../shim/index.js";
import { readLedger, startRig, sum } from "./shim-fixture.js";
import { collectPatch, gitWorkdir, runClaude, runCodex } from "./shim-harness-fixture.js";

const USD = 1_000_000_000;

/** Wait for the attempt's core signal (what the task entrypoint listens to). */
function signalOnce(rig: Awaited<ReturnType<typeof startRig>>, run: string, cell: string): Promise<CapEvent> {
  const sub = rig.nc.subscribe(Subjects.attemptSignal(run, cell, 1), { max: 1 });
  return (async () => {
    for await (const m of sub) return JSON.parse(m.string()) as CapEvent;
    throw new Error("no signal");
  })();
}

describe("real harnesses through the shim", { timeout: 110_000 }, () => {
  test("Claude Code writes the scripted patch; its calls land in the ledger", async () => {
    const wd = await gitWorkdir();
    const rig = await startRig({ run: "cc-ok", maxTurns: 20 });
    try {
      rig.provider.setScenario(
        claudeWriteScenario({ files: [{ path: join(wd, "hello.py"), content: "print('hi')\n" }] }),
      );
      const h = await runClaude(rig.shim.url, wd, "Create hello.py that prints hi.", 5);
      const r = await h.done;
      assert.equal(r.code, 0, r.stderr + r.stdout);
      assert.equal(readFileSync(join(wd, "hello.py"), "utf8"), "print('hi')\n");
      assert.match(collectPatch(wd), /\+print\('hi'\)/);
      await rig.shim.drain();
      const rows = await readLedger(rig.nc, "cc-ok");
      assert.ok(rows.length >= 2, `rows: ${rows.length}`);
      assert.ok(
        rows.every((r) => r.provider === "anthropic" && r.status === "ok" && r.alias.startsWith("claude")),
      );
      assert.equal(
        sum(rows, (r) => r.costNanoUsd),
        rig.provider.bill().total.costNanoUsd,
      );
    } finally {
      await rig.close();
    }
  });

  test("Claude Code with a low attempt budget is stopped as budget_exceeded; its partial patch survives", async () => {
    const wd = await gitWorkdir();
    // Each call reports 50k input tokens: $0.25 at claude-opus-4-8's $5 / Mtok (Claude Code's default model), so
    // $0.40 pays for call 1 and is spent by call 2.
    const rig = await startRig({ run: "cc-budget", budgetNanoUsd: 0.4 * USD });
    try {
      rig.provider.setScenario(
        claudeWriteScenario({
          files: [1, 2, 3].map((i) => ({ path: join(wd, `part${i}.txt`), content: `part ${i}\n` })),
          usage: { input: 50_000 },
        }),
      );
      const signal = signalOnce(rig, "cc-budget", "cell1");
      const h = await runClaude(rig.shim.url, wd, "Write the three parts.", 10);
      const capped = new Promise<CapEvent>((resolve) => rig.shim.onCapReached(resolve));
      const ev = await Promise.race([capped, h.done.then(() => undefined)]);
      assert.ok(ev, "the cap fired before the harness finished");
      assert.equal(ev.reason, "budget_exceeded");
      h.proc.kill("SIGKILL"); // what the task entrypoint does on the signal
      await h.done;
      assert.equal((await signal).reason, "budget_exceeded");
      assert.ok(existsSync(join(wd, "part1.txt")));
      assert.ok(!existsSync(join(wd, "part3.txt")));
      assert.match(collectPatch(wd), /\+part 1/);
      await rig.shim.drain();
      const rows = await readLedger(rig.nc, "cc-budget");
      const totals = rig.shim.totals();
      assert.equal(totals.capReason, "budget_exceeded");
      assert.equal(
        sum(rows, (r) => r.costNanoUsd),
        totals.costNanoUsd,
      );
      assert.equal(totals.costNanoUsd, rig.provider.bill().total.costNanoUsd);
      assert.ok(
        rows.some((r) => r.clampedMaxTokens !== null),
        "the max_tokens the budget could not pay for was clamped",
      );
    } finally {
      await rig.close();
    }
  });

  test("Codex CLI writes the scripted patch over the Responses API; its calls land in the ledger", async () => {
    const wd = await gitWorkdir();
    const rig = await startRig({ run: "cx-ok" });
    try {
      rig.provider.setScenario(
        codexShellScenario({ files: [{ path: "src/main.rs", content: "fn main() {}\n" }] }),
      );
      const h = await runCodex(rig.shim.url, wd, "Create src/main.rs.");
      const r = await h.done;
      assert.equal(r.code, 0, r.stderr + r.stdout);
      assert.equal(readFileSync(join(wd, "src/main.rs"), "utf8"), "fn main() {}\n");
      await rig.shim.drain();
      const rows = await readLedger(rig.nc, "cx-ok");
      assert.ok(rows.length >= 2);
      assert.ok(
        rows.every((r) => r.provider === "openai" && r.endpoint === "responses" && r.status === "ok"),
      );
      assert.equal(
        sum(rows, (r) => r.costNanoUsd),
        rig.provider.bill().total.costNanoUsd,
      );
    } finally {
      await rig.close();
    }
  });

  test("Codex CLI with a low attempt budget is stopped as budget_exceeded; its partial patch survives", async () => {
    const wd = await gitWorkdir();
    // 400k input tokens at gpt-5-codex's $1.25/Mtok = $0.50 a call: $0.80 pays for one call, not two.
    const rig = await startRig({ run: "cx-budget", budgetNanoUsd: 0.8 * USD });
    try {
      rig.provider.setScenario(
        codexShellScenario({
          files: [1, 2, 3].map((i) => ({ path: `part${i}.txt`, content: `part ${i}\n` })),
          usage: { input: 400_000 },
        }),
      );
      const h = await runCodex(rig.shim.url, wd, "Write the three parts.");
      const capped = new Promise<CapEvent>((resolve) => rig.shim.onCapReached(resolve));
      const ev = await Promise.race([capped, h.done.then(() => undefined)]);
      assert.equal(ev?.reason, "budget_exceeded");
      h.proc.kill("SIGKILL");
      await h.done;
      assert.ok(existsSync(join(wd, "part1.txt")));
      assert.ok(!existsSync(join(wd, "part3.txt")));
      assert.match(collectPatch(wd), /\+part 1/);
      await rig.shim.drain();
      const rows = await readLedger(rig.nc, "cx-budget");
      assert.equal(
        sum(rows, (r) => r.costNanoUsd),
        rig.shim.totals().costNanoUsd,
      );
      assert.equal(rig.shim.totals().costNanoUsd, rig.provider.bill().total.costNanoUsd);
    } finally {
      await rig.close();
    }
  });
});
