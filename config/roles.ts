import {
  databaseGroup,
  gatewayUrlGroup,
  hostGroup,
  listenGroup,
  logGroup,
  metricsGroup,
  otelGroup,
  retentionGroup,
  stateGroup,
  topologyGroup,
} from "./common.js";
import { dashboardAccessGroup } from "./dashboard.js";
import { backendGroup } from "./dispatcher.js";
import { gatewayFileGroup } from "./gateway.js";
import { graderGroup } from "./grader.js";
import { imagesGroup } from "./images.js";
import { judgeGroup } from "./judge.js";
import { libraryGroup } from "./library.js";
import { natsServerGroup } from "./local.js";
import { natsGroup } from "./nats.js";
import { teardownGroup } from "./operator.js";
import { providersGroup } from "./providers.js";
import { referenceAgentGroup } from "./reference-agent.js";
import type { AnyGroup } from "./setting.js";
import { shimGroup } from "./shim.js";
import { jobRefGroup, taskGroup } from "./task.js";

/**
 * Every process evalfleet runs, and the settings each reads. A role is what one process is (an actor, the
 * gateway, a harness task, an operator command); its groups are compiled into one typed object at start.
 */
export interface Role<G extends Record<string, AnyGroup> = Record<string, AnyGroup>> {
  name: string;
  /** what runs with these settings (one line, for `evalfleet config` and the docs) */
  doc: string;
  groups: G;
  /** the CLI flags its command takes for settings (`--state-dir`), shown beside their variables */
  flags?: readonly string[];
  /** What the deployed stack must give a container of this role (checked against the synthesised template). */
  deployed?: {
    /** each entry one variable, or alternatives of which one must be set */
    requires: Array<string | string[]>;
    /** variables given per launch (RunTask overrides), not in the task definition */
    perLaunch?: string[];
  };
}

function role<G extends Record<string, AnyGroup>>(r: Role<G>): Role<G> {
  return r;
}

/** Deployed, every plane process is the plane user of the operator-mode account (NATS_JWT + NATS_NKEY_SEED). */
const NATS_CREDENTIAL = [
  "NATS_JWT",
  "NATS_CREDS",
  "NATS_NKEY",
  "NATS_NKEY_SEED",
  "NATS_PASSWORD",
  "NATS_TOKEN",
];
const DEPLOYED_DB = ["DATABASE_URL", "PGHOST"];

const serviceLog = logGroup("info");
const commandLog = logGroup("warn");
const serviceDb = databaseGroup("service");
export const actorBase = {
  log: serviceLog,
  nats: natsGroup,
  database: serviceDb,
  topology: topologyGroup,
  host: hostGroup,
  metrics: metricsGroup,
};
const actorDeployed = { requires: ["NATS_URL", NATS_CREDENTIAL, DEPLOYED_DB] };

/** The local launcher's groups: everything one machine runs. */
function localGroups(log: typeof serviceLog, gatewayPort: string) {
  return {
    log,
    library: libraryGroup,
    nats: natsGroup,
    natsServer: natsServerGroup,
    state: stateGroup,
    database: databaseGroup("local"),
    topology: topologyGroup,
    retention: retentionGroup,
    gateway: listenGroup({
      name: "gateway-listen",
      what: "gateway",
      envPrefix: "EVALFLEET_GATEWAY",
      host: "127.0.0.1",
      port: gatewayPort,
      flags: { host: "gateway-host", port: "gateway-port" },
    }),
    providers: providersGroup,
    otel: otelGroup,
    backend: backendGroup,
    judge: judgeGroup,
    grader: graderGroup,
    task: taskGroup,
    host: hostGroup,
    images: imagesGroup,
  };
}

export const ROLES = {
  planner: role({
    name: "planner",
    doc: "`evalfleet actor planner`: validates and expands submitted runs",
    flags: ["data-dir"],
    groups: { ...actorBase, state: stateGroup, library: libraryGroup },
    deployed: actorDeployed,
  }),
  dispatcher: role({
    name: "dispatcher",
    doc: "`evalfleet actor dispatcher`: budgets and launches attempts",
    flags: ["data-dir"],
    groups: { ...actorBase, gatewayUrl: gatewayUrlGroup, backend: backendGroup },
    deployed: {
      requires: [
        ...actorDeployed.requires,
        // the account's signing key: it mints each attempt's NATS user
        "NATS_ACCOUNT",
        "NATS_SIGNING_KEY",
        "EVALFLEET_HARNESS_CONTAINER",
        "EVALFLEET_BACKEND",
        "EVALFLEET_ECS_CLUSTER",
        "EVALFLEET_HARNESS_TASK_FAMILY",
        "EVALFLEET_TASK_SUBNETS",
        "EVALFLEET_TASK_SECURITY_GROUPS",
      ],
    },
  }),
  "results-writer": role({
    name: "results-writer",
    doc: "`evalfleet actor results-writer`: lands attempts, ledger rows, grades and verdicts; prunes finished runs",
    flags: ["data-dir"],
    groups: { ...actorBase, retention: retentionGroup },
    deployed: actorDeployed,
  }),
  "grader-supervisor": role({
    name: "grader-supervisor",
    doc: "`evalfleet actor grader-supervisor`: grades patches; with EVALFLEET_EVAL_ASG, scales the eval tier",
    flags: ["data-dir"],
    groups: { ...actorBase, grader: graderGroup },
    deployed: actorDeployed,
  }),
  "eval-worker": role({
    name: "eval-worker",
    doc: "`evalfleet eval-worker`: the grader-supervisor on an eval host, grading with the host's Docker",
    flags: ["data-dir"],
    groups: { ...actorBase, grader: graderGroup },
    deployed: actorDeployed,
  }),
  judge: role({
    name: "judge",
    doc: "`evalfleet actor judge`: scores open-ended attempts through the gateway",
    flags: ["data-dir"],
    groups: { ...actorBase, gatewayUrl: gatewayUrlGroup, judge: judgeGroup },
    deployed: { requires: [...actorDeployed.requires, ["EVALFLEET_JUDGE_URL", "EVALFLEET_GATEWAY_URL"]] },
  }),
  gateway: role({
    name: "gateway",
    doc: "`evalfleet gateway`: a gateway replica (per-run keys, aliases, spend log, caps)",
    flags: ["data-dir", "host", "port", "config"],
    groups: {
      log: serviceLog,
      nats: natsGroup,
      database: serviceDb,
      listen: listenGroup({
        name: "gateway-listen",
        what: "gateway",
        envPrefix: "EVALFLEET_GATEWAY",
        host: "127.0.0.1",
        port: "8787",
      }),
      providers: providersGroup,
      file: gatewayFileGroup,
      otel: otelGroup,
    },
    deployed: {
      requires: [
        "NATS_URL",
        NATS_CREDENTIAL,
        DEPLOYED_DB,
        "EVALFLEET_GATEWAY_HOST",
        "EVALFLEET_GATEWAY_PORT",
        "PROVIDER_KEYS",
      ],
    },
  }),
  task: role({
    name: "task",
    doc: "`evalfleet task`: the harness task entrypoint, one attempt (started by a launch backend)",
    flags: ["run", "cell", "attempt", "gateway-url", "workdir", "keep-workdir"],
    groups: {
      log: serviceLog,
      nats: natsGroup,
      gatewayUrl: gatewayUrlGroup,
      job: jobRefGroup,
      task: taskGroup,
      host: hostGroup,
    },
    deployed: {
      requires: ["NATS_URL", "EVALFLEET_GATEWAY_URL"],
      perLaunch: [
        "EVALFLEET_RUN",
        "EVALFLEET_CELL",
        "EVALFLEET_ATTEMPT",
        "EVALFLEET_POOL",
        "NATS_JWT",
        "NATS_NKEY_SEED",
      ],
    },
  }),
  shim: role({
    name: "shim",
    doc: "`evalfleet shim`: one attempt's proxy shim, standalone",
    groups: { log: serviceLog, nats: natsGroup, shim: shimGroup },
  }),
  "reference-agent": role({
    name: "reference-agent",
    doc: "the built-in reference agent (a harness process a task starts)",
    groups: { agent: referenceAgentGroup },
  }),
  local: role({
    name: "local",
    doc: "`evalfleet up`: the whole plane on one machine, in the foreground",
    flags: ["state-dir", "gateway-port"],
    groups: localGroups(serviceLog, "8787"),
  }),
  start: role({
    name: "start",
    doc: "`evalfleet start`: the main job (the plane up, the sample run, its report)",
    flags: ["state-dir"],
    groups: localGroups(commandLog, "0"),
  }),
  dashboard: role({
    name: "dashboard",
    doc: "`evalfleet dashboard`: the live web dashboard",
    flags: ["state-dir", "host", "port"],
    groups: {
      log: commandLog,
      nats: natsGroup,
      state: stateGroup,
      database: databaseGroup("reader"),
      access: dashboardAccessGroup,
      listen: listenGroup({
        name: "dashboard-listen",
        what: "dashboard",
        envPrefix: "EVALFLEET_DASHBOARD",
        host: "127.0.0.1",
        port: "8080",
      }),
    },
  }),
  report: role({
    name: "report",
    doc: "`evalfleet report`: results and patches from the database (the object store for rows written before patches were kept there)",
    flags: ["state-dir"],
    groups: {
      log: commandLog,
      nats: natsGroup,
      natsServer: natsServerGroup,
      state: stateGroup,
      database: databaseGroup("reader"),
    },
  }),
  submit: role({
    name: "submit",
    doc: "`evalfleet submit`: checks the gateway answers, submits a run, prints the planner's verdict",
    // the state folder: where a local plane's NATS credential is found (config/nats.ts)
    groups: { log: commandLog, nats: natsGroup, state: stateGroup, gatewayUrl: gatewayUrlGroup },
  }),
  operator: role({
    name: "operator",
    doc: "`evalfleet watch`, `status`, `drain`, `cancel`, `resume`: live state and run control over NATS",
    flags: ["state-dir"],
    groups: { log: commandLog, nats: natsGroup, state: stateGroup, host: hostGroup },
  }),
  teardown: role({
    name: "teardown",
    doc: "`evalfleet teardown`: stop a run's ECS tasks, revoke its keys, scale the eval tier to zero",
    flags: ["cluster", "asg", "region"],
    groups: {
      log: commandLog,
      nats: natsGroup,
      database: databaseGroup("optional"),
      teardown: teardownGroup,
    },
  }),
  "validate-env": role({
    name: "validate-env",
    doc: "`evalfleet validate-env`: gold- and empty-patch validation of a task library",
    flags: ["data-dir", "registry", "rootfs"],
    groups: { log: commandLog, database: serviceDb, host: hostGroup, images: imagesGroup },
  }),
  images: role({
    name: "images",
    doc: "`evalfleet images build|mirror|list`: instance images built or mirrored into the registry, by digest",
    flags: ["data-dir", "registry", "rootfs"],
    groups: { log: commandLog, database: serviceDb, host: hostGroup, images: imagesGroup },
  }),
  plan: role({
    name: "plan",
    doc: "`evalfleet plan --dry-run`: the planner's verdict and cells for a run file, its tasks' validation included",
    flags: ["state-dir"],
    groups: { log: commandLog, state: stateGroup, database: databaseGroup("optional") },
  }),
} as const;

export type Roles = typeof ROLES;
export type RoleName = keyof Roles;
export const ROLE_NAMES = Object.keys(ROLES) as RoleName[];

/** The actors `evalfleet actor <name...>` can start; one process may run several. */
export const ACTOR_ROLES = ["planner", "dispatcher", "results-writer", "grader-supervisor", "judge"] as const;
export type ActorRoleName = (typeof ACTOR_ROLES)[number];
