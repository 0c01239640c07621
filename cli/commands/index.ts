import type { Command } from "commander";
import * as actor from "./actor.js";
import * as compare from "./compare.js";
import * as config from "./config.js";
import * as control from "./control.js";
import * as dashboard from "./dashboard.js";
import * as evalWorker from "./eval-worker.js";
import * as gateway from "./gateway.js";
import * as gradeLog from "./grade-log.js";
import * as harnessRunner from "./harness-runner.js";
import * as images from "./images.js";
import * as natsAccounts from "./nats-accounts.js";
import * as plan from "./plan.js";
import * as report from "./report.js";
import * as shim from "./shim.js";
import * as start from "./start.js";
import * as status from "./status.js";
import * as submit from "./submit.js";
import * as task from "./task.js";
import * as tasks from "./tasks.js";
import * as teardown from "./teardown.js";
import * as trajectories from "./trajectories.js";
import * as up from "./up.js";
import * as validateEnv from "./validate-env.js";
import * as watch from "./watch.js";

/** Every CLI command module; add yours here. */
const commands: Array<{ register(program: Command): void }> = [
  start,
  up,
  actor,
  evalWorker,
  submit,
  task,
  harnessRunner,
  plan,
  tasks,
  images,
  teardown,
  gradeLog,
  gateway,
  shim,
  validateEnv,
  natsAccounts,
  control,
  watch,
  status,
  report,
  compare,
  trajectories,
  dashboard,
  config,
];

export function registerAll(program: Command): void {
  for (const c of commands) c.register(program);
}
