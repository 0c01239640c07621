import { readdir, readFile, realpath, stat } from "node:fs/promises";
import { extname, isAbsolute, join, relative, resolve } from "node:path";
import { parse as parseYaml } from "yaml";
import { type RunConfig, type TaskSpec, TaskSpecSchema } from "../../protocol/config.js";
import { documentIssues, zodIssues } from "../../protocol/decode.js";
import { ErrorCode, type Issue, ValidationError } from "../../protocol/errors.js";

const TASK_FILE = /\.(ya?ml|json)$/i;

/** A task library: every task file in one folder, keyed by id, with where each came from. */
export interface TaskLibrary {
  dir: string;
  tasks: Map<string, TaskSpec>;
  files: Map<string, string>;
}

/**
 * Load every task YAML / JSON in `dir` (not recursive). Every file is validated; every problem in every file is
 * reported at once, with the file name in the path.
 */
export async function loadTaskLibrary(dir: string): Promise<TaskLibrary> {
  let names: string[];
  try {
    names = (await readdir(dir)).filter((n) => TASK_FILE.test(n)).sort();
  } catch (err) {
    throw new ValidationError(ErrorCode.InvalidConfig, `task library ${dir} cannot be read`, [
      {
        path: "task_library_path",
        reason: `${(err as NodeJS.ErrnoException).code ?? "error"}: ${dir} — point it at a folder of task YAMLs`,
      },
    ]);
  }
  const tasks = new Map<string, TaskSpec>();
  const files = new Map<string, string>();
  const issues: Issue[] = [];
  for (const name of names) {
    const file = join(dir, name);
    let raw: unknown;
    try {
      const text = await readFile(file, "utf8");
      raw =
        extname(name).toLowerCase() === ".json" ? JSON.parse(text) : parseYaml(text, { logLevel: "error" });
    } catch (err) {
      issues.push({
        path: name,
        reason: `cannot parse: ${err instanceof Error ? err.message.split("\n")[0] : String(err)}`,
      });
      continue;
    }
    // A spec passes its extra fields through to the jobs bucket as JSON: nothing too deep or self-referential.
    const shape = documentIssues(raw);
    const r = TaskSpecSchema.safeParse(raw);
    if (!r.success || shape.length > 0) {
      for (const i of [...shape, ...(r.success ? [] : zodIssues(r.error))])
        issues.push({ path: `${name}:${i.path}`, reason: i.reason });
      continue;
    }
    const prev = files.get(r.data.id);
    if (prev) {
      issues.push({ path: `${name}:id`, reason: `task id ${r.data.id} is also defined in ${prev}` });
      continue;
    }
    tasks.set(r.data.id, r.data);
    files.set(r.data.id, name);
  }
  if (issues.length > 0)
    throw new ValidationError(
      ErrorCode.InvalidConfig,
      `task library ${dir} has ${issues.length} invalid task file(s)`,
      issues,
    );
  return { dir, tasks, files };
}

/** Resolve `task_library_path` against the folder the run file lives in (or the working directory). */
export function libraryDir(config: RunConfig, baseDir: string): string {
  return isAbsolute(config.task_library_path)
    ? config.task_library_path
    : resolve(baseDir, config.task_library_path);
}

/** Is `inner` the folder `outer` or inside it (both absolute, already resolved)? */
function within(outer: string, inner: string): boolean {
  const rel = relative(outer, inner);
  return rel === "" || (!rel.startsWith("..") && !isAbsolute(rel));
}

async function realDir(path: string): Promise<string | undefined> {
  try {
    const real = await realpath(path);
    return (await stat(real)).isDirectory() ? real : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Where the planner reads a run's task library: a relative `task_library_path` is looked up under each library
 * root in order (the first folder that exists wins); an absolute one must lie inside a root. Symbolic links are
 * followed before the check, so a link inside a root cannot lead the planner out of it. Anything else is refused
 * with the roots listed: a submitter must not be able to make the planner read any folder of its host.
 */
export async function resolveLibraryDir(path: string, roots: readonly string[]): Promise<string> {
  const realRoots = (await Promise.all(roots.map(async (r) => ({ root: r, real: await realDir(r) })))).filter(
    (r): r is { root: string; real: string } => r.real !== undefined,
  );
  const listed = roots.join(", ") || "(none)";
  const refuse = (reason: string) =>
    new ValidationError(ErrorCode.InvalidConfig, `task library ${JSON.stringify(path)} is refused`, [
      {
        path: "task_library_path",
        reason: `${reason}; the task library roots are: ${listed}. Put the library under one of them (and give its path relative to it), or start the planner with EVALFLEET_TASK_LIBRARY_ROOTS including its folder`,
      },
    ]);
  const candidates = isAbsolute(path) ? [path] : realRoots.map((r) => resolve(r.real, path));
  for (const c of candidates) {
    const real = await realDir(c);
    if (real === undefined) continue;
    if (realRoots.some((r) => within(r.real, real))) return real;
    throw refuse(
      isAbsolute(path)
        ? `${path} is outside every task library root`
        : `${c} leads outside every task library root (to ${real})`,
    );
  }
  if (isAbsolute(path) && !realRoots.some((r) => within(r.real, resolve(path))))
    throw refuse(`${path} is outside every task library root`);
  throw refuse(
    isAbsolute(path)
      ? `${path} is not a folder`
      : `no folder ${JSON.stringify(path)} exists under any task library root`,
  );
}

/**
 * The run's tasks in a stable order: `["*"]` is every task in the library sorted by id; otherwise the listed ids in
 * the listed order, with every unknown id reported.
 */
export function selectTasks(config: RunConfig, library: TaskLibrary): TaskSpec[] {
  if (config.tasks.length === 1 && config.tasks[0] === "*") {
    return [...library.tasks.keys()].sort().map((id) => library.tasks.get(id)!);
  }
  const issues: Issue[] = [];
  const out: TaskSpec[] = [];
  config.tasks.forEach((id, i) => {
    const t = library.tasks.get(id);
    if (t) out.push(t);
    else
      issues.push({
        path: `tasks[${i}]`,
        reason: `unknown task id ${JSON.stringify(id)} (not in ${library.dir})`,
      });
  });
  if (issues.length > 0)
    throw new ValidationError(
      ErrorCode.UnknownTask,
      `${issues.length} task id(s) are not in the task library`,
      issues,
    );
  return out;
}
