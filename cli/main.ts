#!/usr/bin/env node
import { Command, CommanderError } from "commander";
import { EvalfleetError, formatIssues } from "../protocol/errors.js";
import { VERSION } from "../protocol/version.js";

/** The evalfleet command line. Each command lives in cli/commands/<name>.ts. */
export async function buildProgram(argv: readonly string[] = []): Promise<Command> {
  const program = new Command("evalfleet")
    .description("Evaluate coding-agent harnesses at scale: paced, metered, capped, graded, durable.")
    .version(VERSION)
    .showHelpAfterError("(run with --help for usage)")
    .exitOverride();
  // `evalfleet task` is started once per attempt, thousands at a time: it loads its own command only, not every
  // command's module graph (that was over a third of a task's CPU).
  if (argv[2] === "task") (await import("./commands/task.js")).register(program);
  else if (argv[2] === "harness-runner") (await import("./commands/harness-runner.js")).register(program);
  else (await import("./commands/index.js")).registerAll(program);
  return program;
}

/** Print a user-facing error and return the exit code. */
export function reportError(err: unknown): number {
  if (err instanceof CommanderError) return err.exitCode === 0 ? 0 : 2;
  if (err instanceof EvalfleetError) {
    process.stderr.write(`error [${err.code}]: ${err.message}\n`);
    if (err.issues.length > 0) process.stderr.write(`${formatIssues(err.issues)}\n`);
    return err.code === "EF_INVALID_CONFIG" || err.code === "EF_INVALID_MESSAGE" ? 2 : 1;
  }
  process.stderr.write(`error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  return 1;
}

async function main(): Promise<void> {
  // `evalfleet plan x --json | head` closes stdout early; that is not an error. A task whose launcher went away
  // (a local dispatcher killed) has lost both pipes: it carries on, its result goes to NATS and its output to
  // nobody — exiting there would end the attempt halfway, with ledger rows still unsent.
  const task = process.argv[2] === "task";
  for (const stream of task ? [process.stdout, process.stderr] : [process.stdout])
    stream.on("error", (err: NodeJS.ErrnoException) => {
      if (err.code !== "EPIPE") throw err;
      if (!task) process.exit(0);
    });
  try {
    await (await buildProgram(process.argv)).parseAsync(process.argv);
  } catch (err) {
    process.exitCode = reportError(err);
  }
}

await main();
