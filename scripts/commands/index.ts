import type { Command } from "commander";

/** Every CLI command module; add yours here. */
const commands: Array<{ register(program: Command): void }> = [];

export function registerAll(program: Command): void {
  for (const c of commands) c.register(program);
}
