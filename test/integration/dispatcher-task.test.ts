import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { after, before, describe, it } from "node:test";
import { LocalBackend } from "../../actors/dispatcher/backends/local.js";
import { requestControl } from "../../actors/dispatcher/control.js";
import { CANCELLED_ERROR } from "../../actors/dispatcher/dispatcher.js";
import { type ScriptedProvider, startScriptedProvider } from "../../scripted-provider/index.js";
import {
  attemptResults,
  cellStatuses,
  type DispatchRig,
  startRig,
  waitFor,
  waitForSettled,
} from "./dispatcher-fixture.js";

const RUN_KEY = "sk-run-dispatch-0123456789abcdef";
let rig: DispatchRig;
let provider: ScriptedProvider;
let tmp: string;

before(async () => {
  rig = await startRig([]);
  provider = await startScriptedProvider({ keys: [RUN_KEY] });
  tmp = await mkdtemp(join(tmpdir(), "ef-disp-task-"));
  // The default command: `node bin/evalfleet.js task`, told only its job reference (+ where NATS is).
  await rig.dispatcher({
    backend: new LocalBackend({
      inheritedEnv: process.env,
      env: {
        ...rig.nats.env,
        EVALFLEET_GATEWAY_URL: provider.url,
        EVALFLEET_RUN_KEY: RUN_KEY,
        EVALFLEET_WORKDIR: join(tmp, "work"),
        EVALFLEET_GIT_MIRRORS: join(tmp, "mirrors"),
        EVALFLEET_LOG_LEVEL: "warn",
      },
    }),
    extra: { retryDelaysMs: [200, 200, 200] },
  });
});

after(async () => {
  await rig.close();
  await provider.close();
  await rm(tmp, { recursive: true, force: true });
});

const cmd = (name: string, command: string) => ({ name, adapter: "command", settings: { command } });

describe("dispatcher → local process → evalfleet task", { timeout: 110_000 }, () => {
  it("real tasks: a fix lands PATCH_READY, a crash HARNESS_ERROR once, a hang TIMEOUT four times", async () => {
    await rig.submit({
      name: "real",
      task_library_path: resolve("examples/tasks"),
      harnesses: [
        cmd("fix", "sed -i '0,/a - b;/s//a + b;/' calc.js"),
        cmd("crash", "echo broken >&2; exit 3"),
        cmd("hang", "sleep 30"),
      ],
      models: [{ name: "gpt-5-mini", provider: "openai" }],
      tasks: ["sample-calc-add"],
      parallel_runs: 3,
      timeout_seconds: 4,
      budget_usd: 3,
    });
    const { results } = await waitForSettled(rig, "real", 6, 100_000);
    const of = (h: string) =>
      results.filter((r) => r.cellId.startsWith(`${h}__`)).sort((a, b) => a.attempt - b.attempt);
    assert.deepEqual(
      of("fix").map((r) => r.status),
      ["PATCH_READY"],
    );
    assert.deepEqual(
      of("crash").map((r) => [r.status, r.exitCode]),
      [["HARNESS_ERROR", 3]],
    );
    assert.deepEqual(
      of("hang").map((r) => [r.status, r.attempt]),
      [
        ["TIMEOUT", 0],
        ["TIMEOUT", 1],
        ["TIMEOUT", 2],
        ["TIMEOUT", 3],
      ],
    );
  });

  it("cancel reaches a real task (signal + SIGTERM): it publishes its result and the cell ends failed, cancelled", async () => {
    await rig.submit({
      name: "real-cancel",
      task_library_path: resolve("examples/tasks"),
      harnesses: [cmd("hang", "sleep 60")],
      models: [{ name: "gpt-5-mini", provider: "openai" }],
      tasks: ["sample-calc-add"],
      timeout_seconds: 60,
    });
    const cell = "hang__gpt-5-mini__sample-calc-add__r0";
    await waitFor(
      "the task runs",
      async () => (await cellStatuses(rig, "real-cancel")).get(cell)?.status === "running",
    );
    await new Promise((r) => setTimeout(r, 2_000)); // let it reach the harness
    await requestControl(rig.client.nc, "real-cancel", "cancel");
    const st = await waitFor("cell failed", async () => {
      const s = (await cellStatuses(rig, "real-cancel")).get(cell);
      return s?.status === "failed" ? s : undefined;
    });
    assert.equal(st.error, CANCELLED_ERROR);
    const results = await attemptResults(rig.client, "real-cancel");
    assert.equal(results.length, 1);
  });
});
