import type { Command } from "commander";
import * as gradeLog from "./grade-log.js";

/** Every CLI command module; add yours here. */
const commands: Array<{ register(program: Command): void }> = [gradeLog];

export function registerAll(program: Command): void {
  for (const c of commands) c.register(program);
}
