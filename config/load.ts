import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { ErrorCode, type Issue, ValidationError } from "../protocol/errors.js";
import { redactSecrets } from "../protocol/redact.js";
import {
  type AnyGroup,
  type CompileContext,
  type Group,
  type Setting,
  SettingsError,
  type Source,
} from "./setting.js";

/** The raw inputs: the process environment, parsed CLI flags (commander's camelCase keys), a settings file. */
export interface SettingsSources {
  env: Readonly<Record<string, string | undefined>>;
  /** commander's options object: `--gateway-port 4000` arrives as `{ gatewayPort: "4000" }` */
  flags?: Readonly<Record<string, unknown>>;
  /** a settings file's entries, by variable name (readSettingsFile) */
  file?: Readonly<Record<string, string>>;
  /** the file's path, for messages */
  filePath?: string;
  /** the flags this process's command takes (others are neither read nor shown); absent: none */
  flagNames?: ReadonlySet<string>;
}

/** One setting as it is in effect: for `evalfleet config` (value masked when secret). */
export interface EffectiveSetting {
  group: string;
  env: string;
  flag?: string;
  source: Source;
  /** the value as text, secrets masked, URL passwords redacted; undefined when unset */
  display?: string;
  secret: boolean;
  doc: string;
}

export type GroupsOut<G extends Record<string, AnyGroup>> = {
  [K in keyof G]: G[K] extends Group<infer _S, infer O> ? O : never;
};

/** What a group set compiles to, with where each value came from. */
export interface Loaded<T> {
  settings: T;
  effective: EffectiveSetting[];
}

export const MASK = "******";

/** Show a value: secrets masked, passwords inside URLs redacted. */
export function displayValue(s: Setting, raw: string): string {
  return s.secret ? MASK : redactSecrets(raw);
}

function camel(flag: string): string {
  return flag.replace(/-([a-z0-9])/g, (_m, c: string) => c.toUpperCase());
}

/** Pick one setting's raw text: flag, then environment, then file, then the default. Empty text counts as unset. */
export function pick(s: Setting, src: SettingsSources): { raw: string | undefined; source: Source } {
  if (s.flag !== undefined && src.flags && src.flagNames?.has(s.flag)) {
    const f = src.flags[camel(s.flag)];
    if (f !== undefined && f !== null && f !== false && String(f) !== "")
      return { raw: f === true ? "1" : String(f), source: "flag" };
  }
  const e = src.env[s.env];
  if (e !== undefined && e !== "") return { raw: e, source: "env" };
  const fv = src.file?.[s.env];
  if (fv !== undefined && fv !== "") return { raw: fv, source: "file" };
  if (s.default !== undefined) return { raw: s.default, source: "default" };
  return { raw: undefined, source: "unset" };
}

function where(s: Setting, source: Source, filePath?: string): string {
  if (source === "flag") return `--${s.flag}`;
  if (source === "file") return `${s.env} (in ${filePath ?? "the settings file"})`;
  if (source === "default") return `${s.env} (default)`;
  return s.env;
}

/**
 * Compile groups from the sources, collecting every problem before failing: each names the variable (or flag)
 * and where it came from, quotes a non-secret value, never a secret one, and says what to do.
 */
export function loadGroups<G extends Record<string, AnyGroup>>(
  role: string,
  groups: G,
  src: SettingsSources,
  extraCheck?: (settings: GroupsOut<G>, ctx: CompileContext) => void,
): Loaded<GroupsOut<G>> {
  const issues: Issue[] = [];
  const effective: EffectiveSetting[] = [];
  const sources = new Map<string, Source>();
  const parsedByEnv = new Map<string, unknown>();
  const out: Record<string, unknown> = {};
  const ctx: CompileContext = {
    issue: (env, reason) => issues.push({ path: env, reason }),
    source: (env) => sources.get(env) ?? "unset",
    value: <T>(env: string) => parsedByEnv.get(env) as T | undefined,
    env: src.env,
  };
  // First every setting of every group (so every problem is found, and a group may look at another's value) …
  const parsed: Array<[string, AnyGroup, Record<string, unknown>, boolean]> = [];
  for (const [gname, group] of Object.entries(groups)) {
    const values: Record<string, unknown> = {};
    let ok = true;
    for (const [key, s] of Object.entries(group.settings) as [string, Setting][]) {
      const { raw, source } = pick(s, src);
      sources.set(s.env, source);
      const e: EffectiveSetting = {
        group: group.name,
        env: s.env,
        source,
        secret: s.secret === true,
        doc: s.doc,
      };
      if (s.flag !== undefined && src.flagNames?.has(s.flag)) e.flag = s.flag;
      if (raw !== undefined) e.display = displayValue(s, raw);
      effective.push(e);
      const result = s.schema.safeParse(raw);
      if (result.success) {
        values[key] = result.data;
        parsedByEnv.set(s.env, result.data);
        continue;
      }
      ok = false;
      const got =
        raw === undefined
          ? ""
          : s.secret
            ? ` (got a value of ${raw.length} characters)`
            : ` (got ${JSON.stringify(redactSecrets(raw))})`;
      for (const i of result.error.issues)
        issues.push({
          path: where(s, source, src.filePath),
          reason: `${i.message}${got}${s.hint ? `; ${s.hint}` : ""}`,
        });
    }
    parsed.push([gname, group, values, ok]);
  }
  // … then each group's cross-field checks; a group whose own values failed is not compiled (it would only repeat
  // the problem).
  for (const [gname, group, values, ok] of parsed) if (ok) out[gname] = group.compile(values as never, ctx);
  if (issues.length === 0 && extraCheck) extraCheck(out as GroupsOut<G>, ctx);
  if (issues.length > 0) throw new SettingsError(role, issues);
  return { settings: out as GroupsOut<G>, effective };
}

/**
 * Read a settings file: YAML or JSON, one mapping of variable name to value (`NATS_URL: nats://…`). Values may
 * be strings, numbers or booleans; nothing nested.
 */
export function readSettingsFile(path: string): Record<string, string> {
  let doc: unknown;
  try {
    doc = parseYaml(readFileSync(path, "utf8"));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new ValidationError(
      ErrorCode.InvalidConfig,
      code === "ENOENT"
        ? `settings file ${path} does not exist: check the path given with --settings / EVALFLEET_SETTINGS`
        : `settings file ${path} cannot be read as YAML or JSON: ${err instanceof Error ? err.message : String(err)}`,
      [],
    );
  }
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== "object" || Array.isArray(doc))
    throw new ValidationError(
      ErrorCode.InvalidConfig,
      `settings file ${path} must be a mapping of variable names to values (NATS_URL: nats://…)`,
      [],
    );
  const out: Record<string, string> = {};
  const issues: Issue[] = [];
  for (const [k, v] of Object.entries(doc as Record<string, unknown>)) {
    if (!/^[A-Z][A-Z0-9_]*$/.test(k))
      issues.push({ path: k, reason: "is not a variable name (UPPER_SNAKE_CASE)" });
    else if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") out[k] = String(v);
    else if (Array.isArray(v) && v.every((x) => typeof x === "string")) out[k] = v.join(",");
    else issues.push({ path: k, reason: "must be a string, number, boolean or list of strings" });
  }
  if (issues.length > 0)
    throw new ValidationError(
      ErrorCode.InvalidConfig,
      `settings file ${path} has entries that are not settings`,
      issues,
    );
  return out;
}
