#!/usr/bin/env node
import { Command, CommanderError } from "commander";
import { EvalfleetError, formatIssues } from "../protocol/errors.js";
import { VERSION } from "../protocol/version.js";
import { registerAll } from "./commands/index.js";

/** The evalfleet command line. Each command lives in scripts/commands/<name>.ts. */
export function buildProgram(): Command {
  const program = new Command("evalfleet")
    .description("Evaluate coding-agent harnesses at scale: paced, metered, capped, graded, durable.")
    .version(VERSION)
    .showHelpAfterError("(run with --help for usage)")
    .exitOverride();
  registerAll(program);
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
  // `evalfleet plan x --json | head` closes stdout early; that is not an error.
  process.stdout.on("error", (err: NodeJS.ErrnoException) => {
    if (err.code === "EPIPE") process.exit(0);
    throw err;
  });
  try {
    await buildProgram().parseAsync(process.argv);
  } catch (err) {
    process.exitCode = reportError(err);
  }
}

await main();
