import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { jetstreamManager } from "@nats-io/jetstream";
import { INLINE_PATCH_MAX_BYTES } from "../../protocol/messages.js";
import { BlobNames, StateKeys, Subjects } from "../../protocol/subjects.js";
import { JobRefEnv } from "../../protocol/task.js";
import { attemptDirs } from "../../task/index.js";
import { startNats } from "../helpers/nats.js";
import { collectOutput, exitOf } from "../helpers/proc.js";
import { forSuite } from "../helpers/suite.js";
import { RUN_KEY, startTaskRig } from "./task-fixture.js";

const FAKE_KEY = "sk-live-PLANTEDabcdefghijklmnop0123456789";

const commandRun = (name: string, command: string, extra: Record<string, unknown> = {}) => ({
  name,
  harnesses: [{ name: "cmd", adapter: "command" as const, settings: { command } }],
  ...extra,
});

/** Running, not a zombie waiting for a reaper (in a container, PID 1 may never reap it). */
function pidAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !/^\d+ \(.*\) [ZX]/.test(stat);
  } catch {
    return false;
  }
}

describe("harness task with command harnesses", { timeout: 110_000 }, () => {
  const rig = forSuite(startTaskRig, (r) => r.close());

  test("a harness that hangs is stopped at the run's timeout, with its whole process group: TIMEOUT", async () => {
    const cell = await rig().plan(
      commandRun("cmd-hang", 'sleep 300 & echo $! > "$EVALFLEET_TRAJECTORY.bgpid"; echo started; sleep 300', {
        timeout_seconds: 1,
      }),
    );
    const r = await rig().run("cmd-hang", cell, 1, { keepWorkdir: true });
    assert.equal(r.status, "TIMEOUT", r.errorMessage ?? "");
    assert.match(
      r.errorMessage ?? "",
      /after 1 s/,
      "stopped at the run's timeout, not the harness's own end",
    );
    assert.match(r.stdout, /started/);
    assert.match(r.errorMessage ?? "", /timed out/);
    const out = attemptDirs(rig().workRoot, { run: "cmd-hang", cell, attempt: 1 }).out;
    const bg = Number(readFileSync(`${out}/harness-trajectory.jsonl.bgpid`, "utf8"));
    for (let i = 0; i < 50 && pidAlive(bg); i++) await new Promise((res) => setTimeout(res, 20));
    assert.ok(bg > 0 && !pidAlive(bg), "the harness's background child was killed with it");
    assert.equal((await rig().published("cmd-hang", cell)).status, "TIMEOUT");
  });

  test("a crashing harness lands HARNESS_ERROR; planted keys never reach the result or the blobs", async () => {
    const script = [
      `echo "calling with ${FAKE_KEY}"`,
      `echo "OPENAI_API_KEY=$OPENAI_API_KEY"`,
      `echo "Traceback: auth failed for key ${FAKE_KEY}" >&2`,
      `echo "Authorization: Bearer ${FAKE_KEY}" >&2`,
      `echo '{"event":"boom","key":"${FAKE_KEY}"}' >> "$EVALFLEET_TRAJECTORY"`,
      "echo 'broken' > calc.js",
      "exit 3",
    ].join("\n");
    const cell = await rig().plan(commandRun("cmd-crash", script));
    const r = await rig().run("cmd-crash", cell);
    assert.equal(r.status, "HARNESS_ERROR");
    assert.equal(r.exitCode, 3);
    assert.match(r.stderr, /Traceback: auth failed for key \[REDACTED\]/);
    assert.match(r.errorMessage ?? "", /exited with code 3/);
    const blobs = await Promise.all(
      (["stdout.txt", "stderr.txt", "trajectory.jsonl"] as const).map((f) =>
        rig().blob(BlobNames.attempt("cmd-crash", cell, 1, f)),
      ),
    );
    assert.ok(blobs[2]?.includes("boom"), "the harness's trajectory file was kept");
    assert.match(r.patch ?? "", /\+broken/, "a crashed harness's patch is still kept (small: inline)");
    assert.equal(r.patchRef, null);
    const everything = JSON.stringify(await rig().published("cmd-crash", cell)) + blobs.join("\n");
    assert.ok(!everything.includes("PLANTED"), "the planted key never lands");
    assert.ok(!everything.includes(RUN_KEY), "the run key never lands");
    assert.match(everything, /\[REDACTED\]/);
  });

  test("a patch past the inline limit goes to the object store, whole", async () => {
    const lines = Math.ceil(INLINE_PATCH_MAX_BYTES / 20) + 100;
    const cell = await rig().plan(
      commandRun("cmd-bigpatch", `seq 1 ${lines} | sed 's/^/generated line number /' > big.txt`),
    );
    const r = await rig().run("cmd-bigpatch", cell);
    assert.equal(r.status, "PATCH_READY");
    assert.equal(r.patch, null, "too big to travel inline");
    const blob = (await rig().blob(r.patchRef ?? "")) ?? "";
    assert.ok(Buffer.byteLength(blob) > INLINE_PATCH_MAX_BYTES);
    assert.match(blob, new RegExp(`\\+generated line number ${lines}\n`));
    assert.equal(r.patchHash, createHash("sha256").update(blob).digest("hex"));
  });

  test("output over 50 KB keeps the last 50 KB with a truncation notice", async () => {
    const cell = await rig().plan(
      commandRun("cmd-loud", "yes 'line of output' | head -n 20000; echo LAST-LINE"),
    );
    const r = await rig().run("cmd-loud", cell);
    assert.equal(r.status, "EMPTY_PATCH");
    assert.match(r.stdout, /^\[truncated: \d+ of \d+ bytes omitted/);
    assert.match(r.stdout, /LAST-LINE\n$/);
    assert.ok(Buffer.byteLength(r.stdout) < 51 * 1024);
    assert.equal(r.patchRef, null);
    assert.equal(r.usage.calls, 0);
  });

  test("a command harness calls the model through the shim with the dummy key: PATCH_READY, metered", async () => {
    const script = [
      'curl -sf "$OPENAI_BASE_URL/chat/completions" -H "authorization: Bearer $OPENAI_API_KEY"',
      ' -H "content-type: application/json"',
      ` -d '{"model":"gpt-5-mini","messages":[{"role":"user","content":"fix it"}]}' > reply.json`,
    ].join("");
    const cell = await rig().plan(commandRun("cmd-call", script));
    const r = await rig().run("cmd-call", cell);
    assert.equal(r.status, "PATCH_READY", `${r.errorMessage} ${r.stderr}`);
    assert.equal(r.usage.calls, 1);
    assert.ok(r.usage.inputTokens > 0 && r.usage.costNanoUsd > 0);
    assert.match((await rig().patch(r)) ?? "", /reply\.json/);
  });

  test("`evalfleet task` takes the job reference from the environment and its attempt's key from KV, publishes, exits 0", async () => {
    const script = [
      'curl -sf "$OPENAI_BASE_URL/chat/completions" -H "authorization: Bearer $OPENAI_API_KEY"',
      ` -H "content-type: application/json" -d '{"model":"gpt-5-mini","messages":[{"role":"user","content":"hi"}]}'`,
      " && echo hello > hello.txt",
    ].join("");
    const cell = await rig().plan(commandRun("cmd-cli", script));
    // No EVALFLEET_RUN_KEY below: the task reads the key the dispatcher minted for its attempt.
    await rig().plane.kv.jobs.put(StateKeys.attemptKey("cmd-cli", cell, 4), RUN_KEY);
    const child = spawn(process.execPath, ["--import", "tsx", "cli/main.ts", "task"], {
      env: rig().cliEnv("cmd-cli", cell, 4, {
        // admission through the fleet pacer, this process owning the pool
        EVALFLEET_PACER: "fleet",
        EVALFLEET_PACER_OWN: "1",
        [JobRefEnv.pool]: "cmd__gpt-5-mini",
      }),
      stdio: ["ignore", "pipe", "pipe"],
    });
    const out = collectOutput(child);
    assert.equal(await exitOf(child), 0, out.text());
    assert.match(out.text(), /"status":"PATCH_READY"/);
    const r = await rig().published("cmd-cli", cell, 4);
    assert.equal(r.attempt, 4);
    assert.equal(r.status, "PATCH_READY", r.errorMessage ?? "");
    assert.equal(r.usage.calls, 1);
    assert.match((await rig().patch(r)) ?? "", /\+hello/);
  });

  test("`evalfleet task` whose launcher is gone (both pipes closed) carries on and publishes its result", async () => {
    // The shim cannot reach its upstream: it logs a warning per failed try, each a write to a closed pipe.
    const cell = await rig().plan(
      commandRun(
        "cmd-orphan",
        `curl -s --max-time 3 "$OPENAI_BASE_URL/models" >/dev/null; echo done > done.txt`,
      ),
    );
    const child = spawn(process.execPath, ["bin/evalfleet.js", "task"], {
      env: rig().cliEnv("cmd-orphan", cell, 1, {
        EVALFLEET_GATEWAY_URL: "http://127.0.0.1:1",
        EVALFLEET_RUN_KEY: RUN_KEY,
        EVALFLEET_LOG_LEVEL: "info",
      }),
      stdio: ["ignore", "pipe", "pipe"],
    });
    // The dispatcher that launched it dies: nobody reads its output any more.
    child.stdout.destroy();
    child.stderr.destroy();
    const code = await exitOf(child);
    const r = await rig().published("cmd-orphan", cell);
    assert.equal(r.status, "PATCH_READY", `exit ${code}: ${r.errorMessage ?? ""}`);
    assert.match((await rig().patch(r)) ?? "", /\+done/);
  });

  test("`evalfleet task` opens the topology the actors made and never creates it: a bare server is an error that says so", async () => {
    const bare = await startNats();
    try {
      const child = spawn(process.execPath, ["bin/evalfleet.js", "task"], {
        env: {
          PATH: process.env.PATH ?? "",
          HOME: process.env.HOME ?? "/tmp",
          ...bare.env,
          [JobRefEnv.run]: "r",
          [JobRefEnv.cell]: "c",
          [JobRefEnv.attempt]: "0",
        },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let err = "";
      child.stderr.on("data", (d: Buffer) => {
        err += d.toString();
      });
      const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
      assert.notEqual(code, 0);
      assert.match(err, /does not have evalfleet's buckets.*evalfleet up/);
      const nc = await bare.connect();
      const streams = await (await jetstreamManager(nc)).streams.names().next();
      assert.deepEqual(streams, [], "the task created no stream");
      await nc.close();
    } finally {
      await bare.cleanup();
    }
  });

  test("SIGTERM to `evalfleet task` stops the harness group, and a result is still published", async () => {
    const cell = await rig().plan(
      commandRun(
        "cmd-term",
        'sleep 300 & echo $! > "$EVALFLEET_TRAJECTORY.bgpid"; echo partial > part.txt; wait',
      ),
    );
    const child = spawn(process.execPath, ["bin/evalfleet.js", "task", "--keep-workdir"], {
      env: rig().cliEnv("cmd-term", cell, 1, { EVALFLEET_RUN_KEY: RUN_KEY }),
      stdio: ["ignore", "pipe", "pipe"],
    });
    const out = collectOutput(child);
    const exited = exitOf(child);
    const pidFile = `${attemptDirs(rig().workRoot, { run: "cmd-term", cell, attempt: 1 }).out}/harness-trajectory.jsonl.bgpid`;
    for (let i = 0; i < 300 && !(existsSync(pidFile) && readFileSync(pidFile, "utf8").trim()); i++)
      await new Promise((res) => setTimeout(res, 50));
    const bg = Number(readFileSync(pidFile, "utf8"));
    await new Promise((res) => setTimeout(res, 200));
    child.kill("SIGTERM");
    assert.equal(await exited, 0, out.text());
    for (let i = 0; i < 50 && pidAlive(bg); i++) await new Promise((res) => setTimeout(res, 20));
    assert.ok(!pidAlive(bg), "the harness's process group was stopped");
    const r = await rig().published("cmd-term", cell);
    assert.equal(r.status, "HARNESS_ERROR");
    assert.match(r.errorMessage ?? "", /SIGTERM/);
    assert.match((await rig().patch(r)) ?? "", /\+partial/);
  });

  test("a cancel on the attempt's signal subject stops the harness: HARNESS_ERROR", async () => {
    const cell = await rig().plan(commandRun("cmd-cancel", "echo waiting > started.txt; sleep 300"));
    const running = rig().run("cmd-cancel", cell);
    // Cancel once the harness is running (a loaded machine may take seconds to get there).
    const started = join(
      attemptDirs(rig().workRoot, { run: "cmd-cancel", cell, attempt: 1 }).repo,
      "started.txt",
    );
    for (let i = 0; i < 600 && !existsSync(started); i++) await new Promise((res) => setTimeout(res, 100));
    assert.ok(existsSync(started), "the harness never started");
    rig().plane.nc.publish(
      Subjects.attemptSignal("cmd-cancel", cell, 1),
      JSON.stringify({ reason: "cancelled by operator", run: "cmd-cancel", cellId: cell, attempt: 1 }),
    );
    const r = await running;
    assert.equal(r.status, "HARNESS_ERROR");
    assert.match(r.errorMessage ?? "", /cancelled by operator/);
  });
});
