import { execFile } from "node:child_process";

/** Fixed identity and dates (the grader's): the same folder always yields the same base commit id. */
export const GIT_ENV = {
  GIT_AUTHOR_NAME: "evalfleet",
  GIT_AUTHOR_EMAIL: "grader@evalfleet.invalid",
  GIT_COMMITTER_NAME: "evalfleet",
  GIT_COMMITTER_EMAIL: "grader@evalfleet.invalid",
  GIT_AUTHOR_DATE: "2000-01-01T00:00:00Z",
  GIT_COMMITTER_DATE: "2000-01-01T00:00:00Z",
  GIT_TERMINAL_PROMPT: "0",
  GIT_CONFIG_NOSYSTEM: "1",
};

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
): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    execFile(
      "git",
      [...BASE_ARGS, ...args],
      {
        cwd,
        env: {
          PATH: process.env.PATH ?? "/usr/bin:/bin",
          HOME: process.env.HOME ?? "/tmp",
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
  });
}

export async function gitText(
  cwd: string,
  args: string[],
  extraEnv: Record<string, string> = {},
): Promise<string> {
  return (await git(cwd, args, extraEnv)).toString("utf8").trim();
}
