/**
 * The two-container attempt's handoff (task/runner.ts): the task hands the harness its command through the shared
 * volume and follows it there; the runner (here in this process, in the rehearsal a container of its own under
 * another uid) runs it. The scripted fix lands exactly as when the task runs the harness itself.
 */
import assert from "node:assert/strict";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { referenceFixScenario } from "../../scripted-provider/fixes.js";
import { runHarnessRunner } from "../../task/runner.js";
import { FIXED_CALC, startTaskRig, type TaskRig } from "./task-fixture.js";

describe("harness task handing its harness to a runner", { timeout: 110_000 }, () => {
  let rig: TaskRig;
  let dir: string;
  before(async () => {
    rig = await startTaskRig();
    dir = await mkdtemp(path.join(tmpdir(), "ef-runner-"));
  });
  after(async () => {
    await rig.close();
    await rm(dir, { recursive: true, force: true });
  });

  test("the reference agent's fix lands as PATCH_READY through the runner, which then exits 0", async () => {
    const cell = await rig.plan({ name: "runner-ok", max_turns: 10, max_cost_usd: 1 });
    rig.provider.setScenario(referenceFixScenario({ files: [{ path: "calc.js", content: FIXED_CALC }] }));
    const runner = runHarnessRunner(dir, { pollMs: 20 });
    const r = await rig.run("runner-ok", cell, 1, {
      // As on ECS: the attempts' folders live on the volume the runner watches.
      workRoot: path.join(dir, "work"),
      env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/tmp", EVALFLEET_HARNESS_RUNNER: dir },
    });
    assert.equal(r.status, "PATCH_READY", `${r.errorMessage}\n${r.stderr}`);
    assert.equal(r.exitCode, 0);
    assert.match((await rig.patch(r)) ?? "", /^\+ {2}return a \+ b;$/m);
    assert.equal(await runner, 0, "the task released the runner");
    const files = await readdir(path.join(dir, "control"));
    assert.ok(files.includes("0.launch.json") && files.includes("0.exit.json") && files.includes("done"));
  });

  test("a launch outside the attempt's folder is refused with a spawn error and nothing runs", async () => {
    const other = await mkdtemp(path.join(tmpdir(), "ef-runner-"));
    await writeFile(path.join(other, "ignored"), "");
    const ctl = path.join(other, "control");
    await import("node:fs/promises").then((fs) => fs.mkdir(ctl));
    await writeFile(
      path.join(ctl, "0.launch.json"),
      JSON.stringify({
        command: "/bin/sh",
        args: ["-c", "id"],
        cwd: "/",
        env: {},
        timeoutMs: 1000,
        graceMs: 10,
      }),
    );
    await writeFile(path.join(ctl, "done"), "");
    // `done` is only honoured between sessions: session 0 is read first and refused.
    const code = await runHarnessRunner(other, { pollMs: 10 });
    assert.equal(code, 0);
    const exit = JSON.parse(await readFile(path.join(ctl, "0.exit.json"), "utf8")) as { spawnError: string };
    assert.match(exit.spawnError, /refused: a launch must be well-formed and run inside the attempt/);
    assert.deepEqual(
      (await readdir(ctl)).sort(),
      ["0.exit.json", "0.launch.json", "done"],
      "nothing was run",
    );
    await rm(other, { recursive: true, force: true });
  });
});
