import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdir, mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

export const CLAUDE_BIN = resolve("node_modules/.bin/claude");
export const CODEX_BIN = resolve("node_modules/.bin/codex");

/** A temp git repository at an initial commit, as a harness task's workdir would be. */
export async function gitWorkdir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "ef-shim-wd-"));
  const git = (...args: string[]) => execFileSync("git", args, { cwd: dir, stdio: "pipe" });
  git("init", "-q", "-b", "main");
  await writeFile(join(dir, "README.md"), "# fixture\n");
  git("add", "-A");
  git("-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "-m", "base");
  return dir;
}

/** The patch a task would collect: everything changed or added since the base commit. */
export function collectPatch(dir: string): string {
  execFileSync("git", ["add", "-A"], { cwd: dir });
  return execFileSync("git", ["diff", "--cached"], { cwd: dir }).toString();
}

export interface Harness {
  proc: ChildProcess;
  done: Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }>;
}

function run(bin: string, args: string[], cwd: string, env: Record<string, string>): Harness {
  // Its own process group: `codex` is a node wrapper around a native binary, and killing the wrapper alone would
  // leave the binary holding our pipes (and the test file's process alive).
  const proc = spawn(bin, args, {
    cwd,
    env: { PATH: process.env.PATH ?? "", ...env },
    stdio: ["ignore", "pipe", "pipe"],
    detached: true,
  });
  let stdout = "";
  let stderr = "";
  proc.stdout?.on("data", (d: Buffer) => {
    stdout += d.toString();
  });
  proc.stderr?.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  const done = new Promise<{
    code: number | null;
    signal: NodeJS.Signals | null;
    stdout: string;
    stderr: string;
  }>((res) =>
    proc.once("exit", (code, signal) => {
      try {
        if (proc.pid) process.kill(-proc.pid, "SIGKILL");
      } catch {
        // the group is already gone
      }
      res({ code, signal, stdout, stderr });
    }),
  );
  return { proc, done };
}

/** Claude Code in print mode pointed at the shim, with its home in a temp folder. */
export async function runClaude(
  shimUrl: string,
  cwd: string,
  prompt: string,
  maxTurns: number,
): Promise<Harness> {
  const home = await mkdtemp(join(tmpdir(), "ef-claude-home-"));
  return run(
    CLAUDE_BIN,
    ["-p", prompt, "--max-turns", String(maxTurns), "--dangerously-skip-permissions"],
    cwd,
    {
      HOME: home,
      CLAUDE_CONFIG_DIR: join(home, ".claude"),
      ANTHROPIC_BASE_URL: shimUrl,
      ANTHROPIC_API_KEY: "dummy",
      IS_SANDBOX: "1",
      DISABLE_TELEMETRY: "1",
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    },
  );
}

/** Codex CLI exec against a custom Responses-API provider at the shim. */
export async function runCodex(shimUrl: string, cwd: string, prompt: string): Promise<Harness> {
  const home = await mkdtemp(join(tmpdir(), "ef-codex-home-"));
  await mkdir(home, { recursive: true });
  await writeFile(
    join(home, "config.toml"),
    [
      'model = "gpt-5-codex"',
      'model_provider = "evalfleet"',
      'approval_policy = "never"',
      'sandbox_mode = "danger-full-access"',
      "",
      "[model_providers.evalfleet]",
      'name = "evalfleet shim"',
      `base_url = "${shimUrl}/v1"`,
      'env_key = "EVALFLEET_HARNESS_KEY"',
      'wire_api = "responses"',
      "request_max_retries = 0",
      "stream_max_retries = 0",
      "",
    ].join("\n"),
  );
  return run(CODEX_BIN, ["exec", "--skip-git-repo-check", prompt], cwd, {
    HOME: home,
    CODEX_HOME: home,
    EVALFLEET_HARNESS_KEY: "dummy",
  });
}
