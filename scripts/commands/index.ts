import type { Command } from "commander";
import * as actor from "./actor.js";
import * as control from "./control.js";
import * as dashboard from "./dashboard.js";
import * as gateway from "./gateway.js";
import * as gradeLog from "./grade-log.js";
import * as plan from "./plan.js";
import * as report from "./report.js";
import * as shim from "./shim.js";
import * as start from "./start.js";
import * as status from "./status.js";
import * as submit from "./submit.js";
import * as task from "./task.js";
import * as tasks from "./tasks.js";
import * as teardown from "./teardown.js";
import * as up from "./up.js";
import * as validateEnv from "./validate-env.js";
import * as watch from "./watch.js";

/** Every CLI command module; add yours here. */
const commands: Array<{ register(program: Command): void }> = [
  start,
  up,
  actor,
  submit,
  task,
  plan,
  tasks,
  teardown,
  gradeLog,
  gateway,
  shim,
  validateEnv,
  control,
  watch,
  status,
  report,
  dashboard,
];

export function registerAll(program: Command): void {
  for (const c of commands) c.register(program);
}
