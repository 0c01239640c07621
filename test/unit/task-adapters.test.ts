import assert from "node:assert/strict";
import { mkdtemp, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, test } from "node:test";
import { loadSettings, SettingsError } from "../../config/index.js";
import { type AdapterContext, adapterFor, claudeReport, reportedCost } from "../../harnesses/index.js";
import { referenceFixScenario } from "../../scripted-provider/fixes.js";
import { attemptStatus } from "../../task/index.js";
import type { HarnessExit } from "../../task/supervise.js";
import { countToolCalls } from "../../task/trajectory.js";

async function ctx(extra: Partial<AdapterContext> = {}): Promise<AdapterContext> {
  const home = await mkdtemp(join(tmpdir(), "ef-adapter-"));
  return {
    workdir: "/repo",
    homeDir: home,
    outDir: home,
    shimUrl: "http://127.0.0.1:4567",
    harnessKey: "dummy",
    model: "m-1",
    provider: "openai",
    maxTurns: 7,
    prompt: "fix it",
    settings: {},
    timeoutSeconds: 60,
    ...extra,
  };
}

const exit = (e: Partial<HarnessExit>): HarnessExit => ({
  exitCode: 0,
  signal: null,
  stoppedFor: null,
  spawnError: null,
  stdout: "",
  stderr: "",
  durationMs: 1,
  ...e,
});

describe("attempt status", () => {
  test("a cap beats a timeout and an exit code; a timeout beats a crash; exit 0 splits on the patch", () => {
    assert.equal(
      attemptStatus("budget_exceeded", exit({ stoppedFor: "cap", exitCode: null }), null, 10),
      "BUDGET_EXCEEDED",
    );
    assert.equal(attemptStatus("max_turns_exceeded", exit({ exitCode: 1 }), null, 0), "MAX_TURNS_EXCEEDED");
    assert.equal(attemptStatus(null, exit({ stoppedFor: "timeout", exitCode: null }), null, 10), "TIMEOUT");
    assert.equal(attemptStatus(null, exit({ exitCode: 2 }), null, 10), "HARNESS_ERROR");
    assert.equal(
      attemptStatus(null, exit({ spawnError: "ENOENT", exitCode: null }), null, 0),
      "HARNESS_ERROR",
    );
    assert.equal(
      attemptStatus(
        null,
        exit({ exitCode: 1 }),
        { status: "MAX_TURNS_EXCEEDED", reportedCostNanoUsd: null },
        0,
      ),
      "MAX_TURNS_EXCEEDED",
    );
    assert.equal(attemptStatus(null, exit({}), null, 10), "PATCH_READY");
    assert.equal(attemptStatus(null, exit({}), null, 0), "EMPTY_PATCH");
    assert.equal(attemptStatus(null, null, null, 0), "HARNESS_ERROR");
  });

  test("the job reference comes from flags or the JobRefEnv variables", () => {
    const ref = (flags: object, env: Record<string, string>) => loadSettings("task", { flags, env }).job;
    assert.deepEqual(ref({}, { EVALFLEET_RUN: "r", EVALFLEET_CELL: "c", EVALFLEET_ATTEMPT: "2" }), {
      run: "r",
      cell: "c",
      attempt: 2,
      pool: "default",
    });
    assert.deepEqual(ref({ run: "x", cell: "y", attempt: "0" }, { EVALFLEET_RUN: "r" }), {
      run: "x",
      cell: "y",
      attempt: 0,
      pool: "default",
    });
    assert.throws(
      () => ref({}, { EVALFLEET_RUN: "r" }),
      (err: unknown) =>
        err instanceof SettingsError &&
        err.issues.map((i) => i.path).join(" ") === "EVALFLEET_CELL EVALFLEET_ATTEMPT" &&
        /--cell/.test(err.issues[0]!.reason),
    );
    assert.throws(
      () => ref({ run: "r", cell: "c", attempt: "-1" }, {}),
      (err: unknown) =>
        err instanceof SettingsError &&
        /--attempt: must be a non-negative whole number/.test(
          `${err.issues[0]?.path}: ${err.issues[0]?.reason}`,
        ),
    );
  });
});

describe("harness reports", () => {
  test("Claude Code's result line gives its own cost and its own turn cap", () => {
    const out = [
      '{"type":"assistant","message":{"content":[{"type":"tool_use","name":"Write","input":{}}]}}',
      '{"type":"result","subtype":"error_max_turns","total_cost_usd":0.25}',
    ].join("\n");
    assert.deepEqual(claudeReport(out), { reportedCostNanoUsd: 250_000_000, status: "MAX_TURNS_EXCEEDED" });
    assert.equal(reportedCost("noise\nevalfleet-cost-usd: 0.5\n"), 500_000_000);
    assert.equal(reportedCost("nothing here"), null);
  });

  test("tool calls are counted from trajectories, Codex completions once", () => {
    assert.equal(
      countToolCalls([
        { type: "assistant", message: { content: [{ type: "tool_use" }, { type: "text" }] } },
        { type: "item.started", item: { type: "command_execution" } },
        { type: "item.completed", item: { type: "command_execution" } },
        { turn: 1, assistant: { tool_calls: [{ id: "a", type: "function", function: { name: "x" } }] } },
      ]),
      3,
    );
  });
});

describe("adapters", () => {
  test("Claude Code: print mode at the shim, private HOME, turn cap, no telemetry", async () => {
    const c = await ctx({ provider: "anthropic" });
    const l = await adapterFor("claude-code").prepare(c);
    assert.ok(l.command.endsWith("claude"));
    assert.deepEqual(l.args.slice(0, 2), ["-p", "fix it"]);
    assert.equal(l.args[l.args.indexOf("--max-turns") + 1], "7");
    assert.ok(l.args.includes("--dangerously-skip-permissions"));
    assert.equal(l.env.ANTHROPIC_BASE_URL, "http://127.0.0.1:4567");
    assert.equal(l.env.ANTHROPIC_API_KEY, "dummy");
    assert.equal(l.env.HOME, c.homeDir);
    assert.equal(l.env.IS_SANDBOX, "1");
    assert.equal(l.env.CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC, "1");
    const listed = await adapterFor("claude-code").prepare(
      await ctx({ settings: { allowed_tools: ["Read", "Edit"] } }),
    );
    assert.ok(!listed.args.includes("--dangerously-skip-permissions"));
    assert.deepEqual(listed.args.slice(listed.args.indexOf("--allowed-tools") + 1).slice(0, 2), [
      "Read",
      "Edit",
    ]);
  });

  test("Codex: CODEX_HOME config.toml names a Responses-API provider at the shim", async () => {
    const c = await ctx();
    const l = await adapterFor("codex").prepare(c);
    const toml = await readFile(join(c.homeDir, "config.toml"), "utf8");
    assert.match(toml, /model_provider = "evalfleet"/);
    assert.match(toml, /base_url = "http:\/\/127\.0\.0\.1:4567\/v1"/);
    assert.match(toml, /wire_api = "responses"/);
    assert.match(toml, /env_key = "EVALFLEET_HARNESS_KEY"/);
    assert.equal(l.env.EVALFLEET_HARNESS_KEY, "dummy");
    assert.equal(l.env.CODEX_HOME, c.homeDir);
    assert.deepEqual(l.args.slice(0, 2), ["exec", "--skip-git-repo-check"]);
  });

  test("opencode: provider options carry baseURL and apiKey; the turn cap is the agent's steps", async () => {
    const c = await ctx({ provider: "anthropic" });
    const l = await adapterFor("opencode").prepare(c);
    const cfg = JSON.parse(await readFile(l.env.OPENCODE_CONFIG!, "utf8"));
    assert.deepEqual(cfg.provider.evalfleet.options, {
      baseURL: "http://127.0.0.1:4567/v1",
      apiKey: "dummy",
    });
    assert.equal(cfg.agent.build.steps, 7);
    assert.equal(cfg.provider.evalfleet.npm, "@ai-sdk/anthropic");
  });

  test("mini-swe-agent and command: LiteLLM / SDK env at the shim; the prompt never enters shell text", async () => {
    const mini = await adapterFor("mini-swe-agent").prepare(await ctx());
    assert.equal(mini.command, "mini");
    assert.equal(mini.args[mini.args.indexOf("--model") + 1], "openai/m-1");
    assert.equal(mini.env.OPENAI_API_BASE, "http://127.0.0.1:4567/v1");
    assert.equal(mini.env.MSWEA_COST_TRACKING, "ignore_errors");
    const cmd = await adapterFor("command").prepare(
      await ctx({ settings: { command: "run-agent" }, prompt: "x'; rm -rf /" }),
    );
    assert.deepEqual([cmd.command, ...cmd.args], ["/bin/sh", "-c", "run-agent"]);
    assert.equal(cmd.env.EVALFLEET_PROMPT, "x'; rm -rf /");
    await assert.rejects(adapterFor("command").prepare(await ctx()), /settings.command/);
    assert.throws(() => adapterFor("sim"), /cannot run as a harness task/);
  });

  test("the reference fix scenario reads, writes each file, then finishes", () => {
    const s = referenceFixScenario({ files: [{ path: "a.js", content: "A" }] });
    const req = (assistants: number) => ({
      provider: "openai" as const,
      endpoint: "chat_completions" as const,
      path: "/v1/chat/completions",
      key: "k",
      body: { tools: [], messages: Array.from({ length: assistants }, () => ({ role: "assistant" })) },
      bodyBytes: 1,
      headers: {},
      index: 0,
    });
    assert.equal(s(req(0)).toolCalls?.[0]?.name, "read_file");
    assert.deepEqual(s(req(1)).toolCalls?.[0], { name: "write_file", input: { path: "a.js", content: "A" } });
    assert.equal(s(req(2)).toolCalls?.[0]?.name, "finish");
  });
});
