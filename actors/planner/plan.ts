import { parse as parseYaml } from "yaml";
import { isFolderTask } from "../../images/library.js";
import { parsePinned } from "../../images/resolve.js";
import { type RunConfig, RunConfigSchema, type TaskSpec, taskSpecHash } from "../../protocol/config.js";
import { documentIssues, zodIssues } from "../../protocol/decode.js";
import { ErrorCode, EvalfleetError, type Issue, ValidationError } from "../../protocol/errors.js";
import { hasSecret, redactSecrets } from "../../protocol/redact.js";
import { unpricedModels } from "../../providers/run-prices.js";
import type { TaskValidation } from "../../store/grades.js";
import { loadTaskLibrary, resolveLibraryDir, selectTasks } from "./library.js";
import { buildMatrix, type Cell } from "./matrix.js";

/** Submissions larger than this are refused before parsing (the stream itself takes up to 1 MiB). */
export const MAX_SUBMISSION_BYTES = 256 * 1024;

/**
 * A submission that could not become a plan: the name (when one could be read) and every problem. It is published
 * and kept in KV, so nothing of the submission it quotes may carry a secret.
 */
export class Rejection extends ValidationError {
  constructor(
    readonly runName: string | undefined,
    message: string,
    issues: Issue[],
    code: (typeof ErrorCode)[keyof typeof ErrorCode] = ErrorCode.InvalidConfig,
  ) {
    super(
      code,
      redactSecrets(message),
      issues.map((i) => ({ path: redactSecrets(i.path), reason: redactSecrets(i.reason) })),
    );
    this.name = "Rejection";
  }
}

const utf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * A best-effort run name from a raw value, so a rejection can be shown where the user is looking (the name becomes
 * a subject token and a KV key, so a name that is a secret is not used).
 */
function nameOf(raw: unknown): string | undefined {
  if (raw && typeof raw === "object" && Object.hasOwn(raw, "name")) {
    const n = (raw as { name: unknown }).name;
    if (typeof n === "string" && n.length > 0 && n.length <= 128 && !hasSecret(n)) return n;
  }
  return undefined;
}

/** The parser's own failure as a reason a person can act on. */
function parseFailure(err: unknown): string {
  const text = (err instanceof Error ? err.message : String(err)).split("\n")[0] ?? "parse error";
  // The YAML parser recurses per level and reports running out of stack as a parse error.
  if (err instanceof RangeError || /Maximum call stack/i.test(text))
    return `nested too deeply to parse; a run config needs only a few levels (${text})`;
  return text;
}

/** Parse a submission body: JSON or YAML, bounded in size, validated against the run-config schema. */
export function parseSubmission(data: Uint8Array): RunConfig {
  if (data.byteLength > MAX_SUBMISSION_BYTES)
    throw new Rejection(
      undefined,
      `submission is ${data.byteLength} bytes; the limit is ${MAX_SUBMISSION_BYTES}`,
      [
        {
          path: "",
          reason: `payload of ${data.byteLength} bytes exceeds ${MAX_SUBMISSION_BYTES}; list tasks by id or use tasks: ["*"] instead of inlining them`,
        },
      ],
      ErrorCode.PayloadTooLarge,
    );
  let text: string;
  try {
    text = utf8.decode(data);
  } catch {
    throw new Rejection(undefined, "submission is not UTF-8 text", [
      { path: "", reason: "send JSON or YAML encoded as UTF-8" },
    ]);
  }
  if (text.trim().length === 0)
    throw new Rejection(undefined, "submission is empty", [
      { path: "", reason: "send a run config as JSON or YAML" },
    ]);
  let raw: unknown;
  const trimmed = text.trimStart();
  try {
    // Warnings (unknown tags, collection keys) would go to the process's stderr, quoting the submission.
    raw =
      trimmed.startsWith("{") || trimmed.startsWith("[")
        ? JSON.parse(text)
        : parseYaml(text, { logLevel: "error" });
  } catch (err) {
    const kind = trimmed.startsWith("{") || trimmed.startsWith("[") ? "JSON" : "YAML";
    throw new Rejection(undefined, `submission is not valid ${kind}`, [
      { path: "", reason: parseFailure(err) },
    ]);
  }
  if (raw === null || typeof raw !== "object" || Array.isArray(raw))
    throw new Rejection(undefined, "submission is not a run config", [
      {
        path: "",
        reason: `expected a mapping with name, harnesses, models, tasks; got ${Array.isArray(raw) ? "a list" : raw === null ? "null" : typeof raw}`,
      },
    ]);
  // The schema walks only the fields it declares; what it passes through (settings) is checked here: nothing too
  // deep or self-referential for JSON.stringify later, and no secrets, which would be stored with the config.
  const r = RunConfigSchema.safeParse(raw);
  const issues = [
    ...documentIssues(raw, { secrets: true }),
    ...(r.success ? unpricedModels(r.data) : zodIssues(r.error)),
  ];
  if (!r.success || issues.length > 0)
    throw new Rejection(
      nameOf(raw),
      `run config has ${issues.length} problem${issues.length === 1 ? "" : "s"}`,
      issues,
    );
  return r.data;
}

/** A validated run, expanded. */
export interface Plan {
  config: RunConfig;
  tasks: TaskSpec[];
  cells: Cell[];
  libraryDir: string;
  /**
   * Tasks not validated, invalid or changed since their validation, each with its reason: empty unless the run was
   * submitted with `unvalidated: true` (otherwise such a run is refused), or validation was not consulted.
   */
  unvalidated: Issue[];
}

/** The gold-validation records of these tasks (store/grades.ts getTaskValidations). */
export type ValidationLookup = (taskIds: string[]) => Promise<ReadonlyMap<string, TaskValidation>>;

/**
 * Why each graded task cannot be trusted to measure anything yet: never validated, marked invalid (with the
 * validator's reason), or changed since it was validated. Open-ended tasks are judged, not graded: never listed.
 */
export function validationProblems(
  tasks: readonly TaskSpec[],
  records: ReadonlyMap<string, TaskValidation>,
  libraryDir: string,
): Issue[] {
  const issues: Issue[] = [];
  const again = `evalfleet validate-env --tasks ${libraryDir}`;
  for (const t of tasks) {
    if (t.track === "open_ended") continue;
    const v = records.get(t.id);
    const path = `tasks: ${t.id}`;
    if (!v) issues.push({ path, reason: `not validated: grade its gold and empty patch first (${again})` });
    else if (!v.valid)
      issues.push({
        path,
        reason: `invalid (validated ${v.validatedAt}): ${v.reason ?? "no reason recorded"}`,
      });
    else if (v.taskHash && v.taskHash !== taskSpecHash(t))
      issues.push({
        path,
        reason: `changed since it was validated (${v.validatedAt}): validate it again (${again})`,
      });
  }
  return issues;
}

/**
 * A SWE-bench task whose file pins no image runs (harness and grade) in the image gold validation graded it in:
 * the spec the run's tasks fetch names it by digest. Folder tasks keep their spec (their harness runs over the
 * offline base; the grader finds the validated image itself).
 */
function withValidatedImage(task: TaskSpec, record: TaskValidation | undefined): TaskSpec {
  if (isFolderTask(task) || parsePinned(task.image) || !record?.valid || record.backend !== "docker")
    return task;
  if (!record.imageRef || record.taskHash !== taskSpecHash(task)) return task;
  return { ...task, image: record.imageRef };
}

/**
 * Resolve the task library under the library roots (see resolveLibraryDir), load it, resolve the task list and
 * expand the matrix. With `validations`, every graded task must be gold-validated as it is now: a run naming one
 * that is not — listed by id or selected by "*" — is refused with each task and its reason, unless it says
 * `unvalidated: true` (then it runs, and the plan lists them). Every failure is a Rejection.
 */
export async function planRun(
  config: RunConfig,
  libraryRoots: readonly string[],
  validations?: ValidationLookup,
): Promise<Plan> {
  let dir: string;
  try {
    dir = await resolveLibraryDir(config.task_library_path, libraryRoots);
  } catch (err) {
    if (err instanceof ValidationError) throw new Rejection(config.name, err.message, err.issues, err.code);
    throw err;
  }
  try {
    const library = await loadTaskLibrary(dir);
    const tasks = selectTasks(config, library);
    if (tasks.length === 0)
      throw new Rejection(config.name, "the run selects no tasks", [
        {
          path: "tasks",
          reason: `task library ${dir} is empty; add task YAMLs or point task_library_path elsewhere`,
        },
      ]);
    const records = validations ? await validations(tasks.map((t) => t.id)) : new Map();
    const problems = validations ? validationProblems(tasks, records, dir) : [];
    if (problems.length > 0 && config.unvalidated !== true)
      throw new Rejection(
        config.name,
        `${problems.length} of the run's ${tasks.length} task(s) are not gold-validated as they are now, so they may measure nothing. Validate them (\`evalfleet validate-env --tasks ${dir}\`), leave them out of \`tasks\`, or submit with --unvalidated (\`unvalidated: true\`; every report then says so)`,
        problems,
      );
    const cells = buildMatrix(config, tasks);
    return {
      config: { ...config, task_library_path: dir },
      tasks: tasks.map((t) => withValidatedImage(t, records.get(t.id))),
      cells,
      libraryDir: dir,
      unvalidated: problems,
    };
  } catch (err) {
    if (err instanceof Rejection) throw err;
    if (err instanceof ValidationError) throw new Rejection(config.name, err.message, err.issues, err.code);
    if (err instanceof EvalfleetError)
      throw new Rejection(config.name, err.message, [{ path: "tasks", reason: err.message }], err.code);
    throw err;
  }
}
