/**
 * evalfleet's settings: one typed schema per role (config/roles.ts), read once at start from the environment, CLI
 * flags and an optional settings file, defaults compiled here, every problem reported at once. The only code in
 * the project that reads `process.env`; every other folder is handed the compiled settings.
 */
import type { Issue } from "../protocol/errors.js";
import { addOwnSecrets, secretsFromEnv } from "../protocol/redact.js";
import { type BenchName, type BenchSettings, loadBenchGroups } from "./bench.js";
import { type HostSettings, hostGroup, stateGroup } from "./common.js";
import { type ImageSettings, imagesGroup } from "./images.js";
import { type LibrarySettings, libraryGroup } from "./library.js";
import {
  type EffectiveSetting,
  type GroupsOut,
  type Loaded,
  loadGroups,
  readSettingsFile,
  type SettingsSources,
} from "./load.js";
import { type NatsSettings, natsGroup } from "./nats.js";
import {
  ACTOR_ROLES,
  type ActorRoleName,
  type actorBase,
  ROLES,
  type Role,
  type RoleName,
  type Roles,
} from "./roles.js";
import { type AnyGroup, type Setting, SettingsError } from "./setting.js";
import type { TaskSettings } from "./task.js";

export type { BenchName, BenchSettings } from "./bench.js";
export { BENCH_GROUPS } from "./bench.js";
export type {
  DatabaseMode,
  DatabaseSettings,
  HostSettings,
  LogLevel,
} from "./common.js";
export { DEFAULT_GATEWAY_URL, postgresUrlFromParts } from "./common.js";
export type { DashboardAccess } from "./dashboard.js";
export type { BackendKind, BackendSettings, EcsSettings, SandboxKind, SimSettings } from "./dispatcher.js";
export { BACKEND_KINDS, SANDBOX_KINDS } from "./dispatcher.js";
export type { AliasSettings, GatewayFileSettings, PoolSettings } from "./gateway.js";
export type { GradeJobMode, GraderSettings } from "./grader.js";
export { GRADE_JOB_MODES } from "./grader.js";
export type { ImageSettings } from "./images.js";
export { DEFAULT_BASE_ROOTFS } from "./images.js";
export type { JudgeSettings } from "./judge.js";
export type { LibrarySettings } from "./library.js";
export { libraryGroup, SHIPPED_LIBRARY_ROOT } from "./library.js";
export type { EffectiveSetting, Loaded, SettingsSources } from "./load.js";
export { displayValue, MASK, readSettingsFile } from "./load.js";
export type { NatsAuth, NatsSettings, NatsTls } from "./nats.js";
export { CREDS_ON_STDIN, DEFAULT_NATS_URL, localPlaneCredsFile, NATS_USER_ENV, natsAt } from "./nats.js";
export type { ProviderName, ProviderUpstream, ProviderUpstreams } from "./providers.js";
export type { ReferenceAgentSettings } from "./reference-agent.js";
export type { ActorRoleName, Role, RoleName } from "./roles.js";
export { ACTOR_ROLES, ROLE_NAMES, ROLES } from "./roles.js";
export type { Setting, Source } from "./setting.js";
export { SettingsError } from "./setting.js";
export type { TaskSettings } from "./task.js";
export { taskEnv } from "./task.js";

/** The compiled settings of a role. */
export type SettingsOf<R extends RoleName> = GroupsOut<Roles[R]["groups"]>;

/** How a process's entry point hands over what it parsed: its flags; the environment is read here. */
export interface LoadOptions {
  /** commander's options object (camelCase keys) */
  flags?: object;
  /** instead of this process's environment (tests, `evalfleet config` for another environment) */
  env?: Readonly<Record<string, string | undefined>>;
}

/** The settings file, if EVALFLEET_SETTINGS names one: variables by name, below the environment in precedence. */
export const SETTINGS_FILE_ENV = "EVALFLEET_SETTINGS";

function sources(opts: LoadOptions, roles: readonly RoleName[]): SettingsSources {
  const env = opts.env ?? process.env;
  const flagNames = new Set(roles.flatMap((r) => (ROLES[r] as Role).flags ?? []));
  const src: SettingsSources = { env, flagNames };
  if (opts.flags) src.flags = opts.flags as Readonly<Record<string, unknown>>;
  const filePath = env[SETTINGS_FILE_ENV];
  if (filePath) {
    src.file = readSettingsFile(filePath);
    src.filePath = filePath;
  }
  return src;
}

function secretValues(groups: Record<string, AnyGroup>, src: SettingsSources): string[] {
  const out = secretsFromEnv(src.env);
  for (const g of Object.values(groups))
    for (const s of Object.values(g.settings) as Setting[])
      if (s.secret) out.push(...[src.env[s.env], src.file?.[s.env]].filter((x): x is string => !!x));
  return out;
}

function loadRoleGroups<G extends Record<string, AnyGroup>>(
  roles: readonly RoleName[],
  groups: G,
  opts: LoadOptions,
): Loaded<GroupsOut<G>> {
  const name = roles.join("+");
  const src = sources(opts, roles);
  // Registered before validation: a refusal must not carry a secret even where it quotes a neighbour's value.
  addOwnSecrets(secretValues(groups, src));
  return loadGroups(name, groups, src);
}

/**
 * Load a role's settings once, at start: flags over the environment over the settings file over the defaults.
 * Throws a SettingsError naming every problem (variable or flag, where it came from, what to do), never a
 * secret's value.
 */
export function loadSettings<R extends RoleName>(role: R, opts: LoadOptions = {}): SettingsOf<R> {
  return loadRoleGroups([role], ROLES[role].groups as Roles[R]["groups"], opts).settings as SettingsOf<R>;
}

/** The merged groups of the actors one process runs (`evalfleet actor planner dispatcher`). */
function actorGroups(names: readonly ActorRoleName[]): Record<string, AnyGroup> {
  const groups: Record<string, AnyGroup> = {};
  for (const n of names) Object.assign(groups, ROLES[n].groups);
  return groups;
}

/** Settings every actor has, and each actor's own part when that actor runs in this process. */
export type ActorSettings = GroupsOut<typeof actorBase> &
  Partial<Pick<SettingsOf<"planner">, "library">> &
  Partial<Pick<SettingsOf<"dispatcher">, "backend" | "gatewayUrl">> &
  Partial<Pick<SettingsOf<"judge">, "judge">> &
  Partial<Pick<SettingsOf<"grader-supervisor">, "grader">> &
  Partial<Pick<SettingsOf<"results-writer">, "retention">> &
  /** present when a local plane runs the actors: the folders and pacing its tasks get */
  Partial<{ task: Omit<TaskSettings, "ref"> }>;

export function isActorRole(name: string): name is ActorRoleName {
  return (ACTOR_ROLES as readonly string[]).includes(name);
}

/** Load the settings of the actors one process runs. */
export function loadActorSettings(names: readonly ActorRoleName[], opts: LoadOptions = {}): ActorSettings {
  return loadRoleGroups(names, actorGroups(names), opts).settings as unknown as ActorSettings;
}

/** What `evalfleet config` shows: every setting with its source, and every problem (nothing thrown). */
export function inspectSettings(
  roles: readonly RoleName[],
  opts: LoadOptions = {},
): { role: string; effective: EffectiveSetting[]; issues: Issue[] } {
  const groups: Record<string, AnyGroup> = {};
  for (const r of roles) Object.assign(groups, ROLES[r].groups);
  const name = roles.join("+");
  const src = sources(opts, roles);
  try {
    const { effective } = loadGroups(name, groups, src);
    return { role: name, effective, issues: [] };
  } catch (err) {
    if (!(err instanceof SettingsError)) throw err;
    // The effective list is rebuilt without the checks that failed, so the user sees both.
    return { role: name, effective: effectiveOnly(groups, src), issues: err.issues };
  }
}

function effectiveOnly(groups: Record<string, AnyGroup>, src: SettingsSources): EffectiveSetting[] {
  const neutral: Record<string, AnyGroup> = {};
  for (const [k, g] of Object.entries(groups))
    neutral[k] = {
      ...g,
      settings: Object.fromEntries(
        Object.entries(g.settings).map(([sk, s]) => [sk, { ...(s as Setting), schema: passThrough }]),
      ),
      compile: () => undefined,
    };
  return loadGroups("inspect", neutral, src).effective;
}

const passThrough = {
  safeParse: (raw: unknown) => ({ success: true as const, data: raw }),
} as unknown as Setting["schema"];

/** A bench's knobs (config/bench.ts) and the environment its children inherit, from this process's environment. */
export function loadBenchSettings<B extends BenchName>(name: B): BenchSettings<B> {
  return loadBenchGroups(name, process.env);
}

/** The NATS connection settings alone (from this process's environment unless sources are given). */
export function loadNatsSettings(src: SettingsSources = { env: process.env }): NatsSettings {
  return loadGroups("nats", { nats: natsGroup }, src).settings.nats;
}

/**
 * What an image build outside any plane needs (deploy/images/build.ts): the base rootfs and registry, and the
 * environment the container runtime is found from — no database.
 */
export function loadImageBuildSettings(src: SettingsSources = { env: process.env }): {
  images: ImageSettings;
  host: HostSettings;
} {
  return loadGroups("images", { images: imagesGroup, host: hostGroup }, src).settings;
}

/** The task library roots the planner reads from (EVALFLEET_TASK_LIBRARY_ROOTS, else its defaults). */
export function loadLibrarySettings(src: SettingsSources = { env: process.env }): LibrarySettings {
  return loadGroups("planner", { state: stateGroup, library: libraryGroup }, src).settings.library;
}
