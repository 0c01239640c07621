import { type ChildProcess, spawn } from "node:child_process";
import { dirname } from "node:path";
import { fileURLToPath } from "node:url";

/** A child process's stdout and stderr, interleaved as they arrive: `text()` is everything so far. */
export function collectOutput(child: ChildProcess): { text(): string } {
  let out = "";
  const add = (d: Buffer) => {
    out += d.toString();
  };
  child.stdout?.on("data", add);
  child.stderr?.on("data", add);
  return { text: () => out };
}

/** The child's exit code (null when a signal ended it), once it has exited. */
export function exitOf(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => child.once("exit", (code) => resolve(code)));
}

const BIN = fileURLToPath(new URL("../../bin/evalfleet.js", import.meta.url));

/** `evalfleet <args>` as a child process (this environment plus `env`), without blocking this one: how it ended. */
export function runEvalfleet(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, [BIN, ...args], {
      cwd: dirname(dirname(BIN)),
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr.on("data", (d: Buffer) => {
      stderr += d.toString();
    });
    child.once("close", (code) => done({ code, stdout, stderr }));
  });
}
