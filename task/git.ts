import { execFile } from "node:child_process";

/** Fixed identity and dates (the grader's, images/testbed.ts): the same folder always yields the same base commit id. */
import { GIT_ENV, GIT_HOST_ENV } from "../images/testbed.js";

export { GIT_ENV };

/**
 * For every git command that builds or reads an attempt's workdir: no system or user config at all (an operator's
 * `~/.gitconfig` may name hooks, templates, an fsmonitor or filters; none of it belongs in an attempt).
 */
export const SEALED_GIT_ENV = { GIT_CONFIG_GLOBAL: "/dev/null", GIT_CONFIG_NOSYSTEM: "1" } as const;

const BASE_ARGS = [
  "-c",
  "init.defaultBranch=main",
  "-c",
  "commit.gpgsign=false",
  "-c",
  "core.autocrlf=false",
  "-c",
  "core.quotepath=off",
];

/** Run git; resolve with stdout as bytes (patches are binary-safe), reject with git's own message. */
export function git(
  cwd: string,
  args: string[],
  extraEnv: Record<string, string> = {},
  timeoutMs = 300_000,
  input?: string | Buffer,
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      "git",
      [...BASE_ARGS, ...args],
      {
        cwd,
        env: {
          ...GIT_HOST_ENV,
          ...GIT_ENV,
          ...extraEnv,
        },
        encoding: "buffer",
        maxBuffer: 512 * 1024 * 1024,
        timeout: timeoutMs,
      },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`git ${args[0]} failed: ${stderr.toString().trim() || err.message}`));
        else resolve(stdout);
      },
    );
    if (input !== undefined) child.stdin?.end(input);
  });
}

export async function gitText(
  cwd: string,
  args: string[],
  extraEnv: Record<string, string> = {},
): Promise<string> {
  return (await git(cwd, args, extraEnv)).toString("utf8").trim();
}
