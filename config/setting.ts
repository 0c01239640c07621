import { accessSync, constants, statSync } from "node:fs";
import { z } from "zod";
import { ErrorCode, type Issue, ValidationError } from "../protocol/errors.js";

/**
 * The building blocks of every role's settings. A setting is one environment variable (and, where a command takes
 * it, one CLI flag): its schema, its default, whether it is secret, one line of documentation. A group is a set of
 * settings compiled into one plain typed object (cross-field checks included); a role is the groups one process
 * reads. Everything is read once, at start, by `loadSettings` (config/load.ts); nothing else reads the environment.
 */

/** Where a setting's value came from (shown by `evalfleet config`). */
export type Source = "flag" | "env" | "file" | "default" | "unset";

/** One setting: an environment variable, optionally a CLI flag, and how its text becomes a value. */
export interface Setting<T = unknown> {
  /** the environment variable (also the key in a settings file) */
  env: string;
  /** the long CLI flag without dashes (`gateway-port`), where a command takes one */
  flag?: string;
  /** one line for the generated table: what it is, what the value means */
  doc: string;
  /** parses the raw text (undefined when unset and no default); its issues name the problem */
  schema: z.ZodType<T, string | undefined>;
  /** the default as text, applied before the schema; compiled here, nowhere else */
  default?: string;
  /** shown in the table where the default is computed (from another setting) rather than a constant */
  defaultDoc?: string;
  /** never printed, never quoted in an error */
  secret?: boolean;
  /** what to do when the value is wrong; appended to the schema's reason */
  hint?: string;
}

/** Collects cross-field problems while a group compiles. */
export interface CompileContext {
  /** report a problem with the setting `env` (or several, comma-joined) */
  issue(env: string, reason: string): void;
  /** where each setting came from, by env name (a compile step may treat a default apart from a given value) */
  source(env: string): Source;
  /** the parsed value of another setting of the same role, by env name (undefined when it is not in the role) */
  value<T>(env: string): T | undefined;
  /** the raw environment: only for groups that hand it on to child processes (host) */
  env: Readonly<Record<string, string | undefined>>;
}

export type Settings = Record<string, Setting<unknown>>;
export type ValuesOf<S extends Settings> = { [K in keyof S]: S[K] extends Setting<infer T> ? T : never };

/** Settings compiled together into one typed object. */
export interface Group<S extends Settings = Settings, Out = unknown> {
  name: string;
  doc: string;
  settings: S;
  compile(values: ValuesOf<S>, ctx: CompileContext): Out;
}

// biome-ignore lint/suspicious/noExplicitAny: any group, whatever its settings and output (compile is contravariant)
export type AnyGroup = Group<any, any>;

export function defineGroup<S extends Settings, Out>(g: Group<S, Out>): Group<S, Out> {
  return g;
}

export function setting<T>(s: Setting<T>): Setting<T> {
  return s;
}

// ---- schemas for environment text ----

/** Optional text: unset (or empty) is undefined. */
export const optionalText = z.string().min(1).optional();

/** Required text, with a reason that says it is missing. */
export function requiredText(what: string): z.ZodType<string, string | undefined> {
  return z.string({ error: `is not set: ${what}` }).min(1, { error: `is empty: ${what}` });
}

/** An integer within bounds. */
export function intText(min: number, max: number): z.ZodType<number, string | undefined> {
  return z
    .string({ error: "is not set" })
    .regex(/^-?\d+$/, { error: `must be a whole number from ${min} to ${max}` })
    .transform(Number)
    .pipe(
      z
        .number()
        .int()
        .min(min, { error: `must be at least ${min}` })
        .max(max, { error: `must be at most ${max}` }),
    );
}

/** A TCP port (0 = any free port, where a role allows it). */
export const portText = (min = 0) => intText(min, 65_535);

/** `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`. */
export const boolText = z
  .string()
  .transform((s) => s.trim().toLowerCase())
  .pipe(
    z.enum(["1", "true", "yes", "on", "0", "false", "no", "off"], {
      error: "must be 1/true/yes/on or 0/false/no/off",
    }),
  )
  .transform((s) => ["1", "true", "yes", "on"].includes(s));

/** One of a fixed set of words. */
export function enumText<const T extends readonly [string, ...string[]]>(
  values: T,
): z.ZodType<T[number], string | undefined> {
  return z.enum(values, { error: `must be one of ${values.join(", ")}` }) as unknown as z.ZodType<
    T[number],
    string | undefined
  >;
}

/** A comma-separated list (spaces around items ignored, empty items dropped). */
export const listText = z
  .string()
  .optional()
  .transform((s) =>
    (s ?? "")
      .split(",")
      .map((x) => x.trim())
      .filter(Boolean),
  );

/** An http(s) URL without a trailing slash. */
export const httpUrlText = z
  .string()
  .refine(
    (s) => {
      try {
        const u = new URL(s);
        return u.protocol === "http:" || u.protocol === "https:";
      } catch {
        return false;
      }
    },
    { error: "must be an http:// or https:// URL" },
  )
  .transform((s) => s.replace(/\/+$/, ""));

/** Why `file` cannot be read as a regular file, or undefined when it can. */
export function unreadableFile(file: string): string | undefined {
  try {
    if (!statSync(file).isFile())
      return `names ${file}, which is not a file: give the path of the file itself`;
    accessSync(file, constants.R_OK);
    return undefined;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return code === "ENOENT"
      ? `names ${file}, which does not exist: check the path (a relative path is from the working directory)`
      : `names ${file}, which this process cannot read (${code ?? "error"}): check its permissions`;
  }
}

/** An optional path of a file that must exist and be readable now (checked once, at start). */
export const optionalFileText = z
  .string()
  .optional()
  .transform((s) => (s === "" ? undefined : s))
  .superRefine((file, ctx) => {
    const why = file === undefined ? undefined : unreadableFile(file);
    if (why) ctx.addIssue({ code: "custom", message: why });
  });

// ---- errors ----

/** Every problem with a process's settings, in one error: each names the setting and says what to do. */
export class SettingsError extends ValidationError {
  constructor(role: string, issues: Issue[]) {
    super(
      ErrorCode.InvalidConfig,
      `the ${role} settings are not valid (${issues.length} problem${issues.length === 1 ? "" : "s"}); fix the environment variables or flags named below (\`evalfleet config --role ${role}\` shows what is in effect)`,
      issues,
    );
    this.name = "SettingsError";
  }
}
