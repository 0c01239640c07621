import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { parse as parseYaml } from "yaml";
import { type TaskSpec, TaskSpecSchema } from "../../protocol/config.js";
import { libraryFixScenario } from "../../scripted-provider/fixes.js";
import { libraryFixes } from "../../scripted-provider/gold.js";
import { prepareWorkdir } from "../../task/index.js";
import { LIBRARY, startTaskRig, type TaskRig } from "./task-fixture.js";

const tasks: TaskSpec[] = readdirSync(LIBRARY)
  .filter((f) => f.endsWith(".yaml"))
  .sort()
  .map((f) => TaskSpecSchema.parse(parseYaml(readFileSync(join(LIBRARY, f), "utf8"))));
const sweTasks = tasks.filter((t) => t.track === "swe");

const HARNESSES = [
  {
    name: "reference",
    adapter: "reference" as const,
    model: { name: "claude-sonnet-4-5", provider: "anthropic" as const },
  },
  {
    name: "claude-code",
    adapter: "claude-code" as const,
    model: { name: "gpt-5-mini", provider: "openai" as const },
  },
];

describe("the sample task library through real harness tasks (what the main job runs offline)", {
  timeout: 115_000,
}, () => {
  let rig: TaskRig;
  let scratch: string;
  before(async () => {
    rig = await startTaskRig();
    scratch = await mkdtemp(join(tmpdir(), "ef-task-lib-"));
    rig.provider.setScenario(libraryFixScenario(await libraryFixes(tasks, LIBRARY, rig.mirrorRoot)));
  });
  after(async () => {
    await rig.close();
    await rm(scratch, { recursive: true, force: true });
  });

  for (const h of HARNESSES) {
    test(`${h.name} (${h.model.name}) fixes every swe sample task; each patch passes its FAIL_TO_PASS tests`, async () => {
      assert.ok(sweTasks.length >= 3);
      for (const task of sweTasks) {
        const run = `lib-${h.name}-${task.id}`;
        const cell = await rig.plan(
          {
            name: run,
            harnesses: [{ name: h.name, adapter: h.adapter }],
            models: [h.model],
            max_turns: 20,
            max_cost_usd: 0.5,
          },
          `${task.id}.yaml`,
        );
        const r = await rig.run(run, cell);
        assert.equal(r.status, "PATCH_READY", `${task.id}: ${r.errorMessage}\n${r.stderr.slice(-1500)}`);
        assert.ok(r.usage.costNanoUsd > 0);
        // What the grader does: a fresh checkout at the same base, the patch applied, the task's tests run.
        const fresh = await prepareWorkdir({
          ref: { run, cell, attempt: 99 },
          task,
          libraryDir: LIBRARY,
          workRoot: scratch,
          mirrorRoot: rig.mirrorRoot,
        });
        const patchFile = join(scratch, `${run}.diff`);
        await writeFile(patchFile, (await rig.patch(r)) ?? "");
        execFileSync("git", ["apply", "--binary", patchFile], { cwd: fresh.dirs.repo });
        let out = "";
        try {
          out = execFileSync("sh", ["-c", task.test_command ?? "false"], { cwd: fresh.dirs.repo }).toString();
        } catch (err) {
          out = String((err as { stdout?: Buffer }).stdout ?? err);
        }
        for (const id of [...task.FAIL_TO_PASS, ...task.PASS_TO_PASS])
          assert.match(
            out,
            new RegExp(`PASSED ${id.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`),
            `${task.id}: ${out}`,
          );
      }
    });
  }

  test("an open-ended task with no repository starts in an empty one", async () => {
    const task = TaskSpecSchema.parse({
      id: "essay",
      track: "open_ended",
      rubric: "any",
      problem_statement: "Write.",
    });
    const wd = await prepareWorkdir({
      ref: { run: "oe", cell: "c", attempt: 1 },
      task,
      libraryDir: LIBRARY,
      workRoot: scratch,
      mirrorRoot: rig.mirrorRoot,
    });
    assert.deepEqual(readdirSync(wd.dirs.repo), [".git"]);
  });
});
