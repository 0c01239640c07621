import { createHash } from "node:crypto";
import { z } from "zod";
import { MAX_USD } from "./money.js";
import { nameProblem } from "./names.js";

/**
 * The run configuration a user submits, with the seed's names in snake_case, and the task spec a task library holds.
 * Unknown keys are rejected so a typo (`repeat:` for `repeats:`) is an error, not a silently ignored setting.
 */

const Name = z.string().superRefine((s, ctx) => {
  const problem = nameProblem(s);
  if (problem) ctx.addIssue({ code: "custom", message: `name ${JSON.stringify(s)} ${problem}` });
});

const Usd = z.number().finite().nonnegative();

/** A price in USD per million tokens: no model costs more than $10,000 per million tokens of anything. */
const PerMtok = Usd.max(10_000, "must be at most 10000 USD per million tokens");
/** Prices in USD per million tokens; cache weights are explicit because they differ per model. */
export const PricesSchema = z.strictObject({
  input_per_mtok: PerMtok,
  output_per_mtok: PerMtok,
  cache_read_per_mtok: PerMtok.optional(),
  cache_write_per_mtok: PerMtok.optional(),
  cache_write_1h_per_mtok: PerMtok.optional(),
});
export type Prices = z.output<typeof PricesSchema>;

export const HARNESS_ADAPTERS = [
  "claude-code",
  "codex",
  "opencode",
  "mini-swe-agent",
  "command",
  "reference",
  "sim",
] as const;
export type HarnessAdapter = (typeof HARNESS_ADAPTERS)[number];

export const HarnessSchema = z.strictObject({
  name: Name,
  adapter: z.enum(HARNESS_ADAPTERS),
  version: z.string().max(64).optional(),
  settings: z.record(z.string(), z.unknown()).default({}),
});
export type HarnessSpec = z.output<typeof HarnessSchema>;

export const MODEL_ROLES = ["implementation", "review"] as const;
export const COST_MODES = ["platform", "subscription"] as const;
export type CostMode = (typeof COST_MODES)[number];

export const ModelSchema = z.strictObject({
  name: Name,
  role: z.enum(MODEL_ROLES).default("implementation"),
  cost_mode: z.enum(COST_MODES).default("platform"),
  provider: z.enum(["anthropic", "openai"]).default("anthropic"),
  /** The upstream model id the gateway alias maps to; defaults to `name`. */
  alias: Name.optional(),
  prices: PricesSchema.optional(),
});
export type ModelSpec = z.output<typeof ModelSchema>;

/** What a timed-out attempt becomes: retried (the seed's rule), or its patch graded like any other. */
export const TIMEOUT_POLICIES = ["retry", "grade"] as const;
export type TimeoutPolicy = (typeof TIMEOUT_POLICIES)[number];
/** How reports count infrastructure failures: apart, out of the resolved rate (default), or as the model's failures. */
export const INFRA_FAILURE_POLICIES = ["apart", "as_failures"] as const;
export type InfraFailurePolicy = (typeof INFRA_FAILURE_POLICIES)[number];

export const RunConfigSchema = z
  .strictObject({
    name: Name,
    harnesses: z.array(HarnessSchema).min(1, "list at least one harness"),
    models: z.array(ModelSchema).min(1, "list at least one model"),
    tasks: z.array(z.string().min(1)).min(1, 'list task ids, or ["*"] for every task in the library'),
    task_library_path: z.string().min(1).default("tasks"),
    repeats: z.number().int("must be a whole number").min(1, "must be at least 1").max(1000).default(1),
    parallel_runs: z
      .number()
      .int("must be a whole number")
      .min(1, "must be at least 1")
      .max(100_000)
      .default(1),
    budget_usd: Usd.max(MAX_USD, `must be at most ${MAX_USD} USD`).optional(),
    docker_image: z.string().max(512).optional(),
    /** Per-attempt caps, enforced by the shim and the task entrypoint for every harness alike. */
    max_turns: z.number().int().min(1).max(10_000).optional(),
    max_cost_usd: z.number().finite().positive().max(MAX_USD, `must be at most ${MAX_USD} USD`).optional(),
    timeout_seconds: z.number().int().min(1).max(86_400).default(1800),
    /**
     * A timed-out attempt: `retry` (the seed's rule, the default when absent: retried after 2 s, 4 s, 8 s, then
     * retry_exhausted) or `grade` (its patch is graded as it stands).
     */
    timeout_policy: z.enum(TIMEOUT_POLICIES).optional(),
    /**
     * Infrastructure failures (image pull, container start, disk, exhausted 429s, provider spend limits, a task that
     * never started): `apart` (the default when absent: counted on their own, out of the resolved rate) or
     * `as_failures` (scored as unresolved, for those who want the stricter figure).
     */
    infra_failures: z.enum(INFRA_FAILURE_POLICIES).optional(),
    /**
     * Run even though some of the tasks are not gold-validated (`evalfleet validate-env`), or were marked invalid:
     * `submit --unvalidated`. Stored with the run; every report says so.
     */
    unvalidated: z.boolean().optional(),
    /**
     * Limits of each attempt's harness container (the container backend): memory (MiB, swap not added), CPUs,
     * processes and threads (a fork bomb stops there), and the size of its /tmp (MiB, counted in its memory).
     */
    sandbox: z
      .strictObject({
        memory_mb: z.number().int().min(64).max(1_048_576).default(4096),
        cpus: z.number().finite().min(0.1).max(256).default(2),
        pids: z.number().int().min(16).max(1_000_000).default(1024),
        tmp_mb: z.number().int().min(1).max(1_048_576).default(512),
      })
      .prefault({}),
    /** The judge for open_ended tasks: a model from `models` (any role) called under the judge's own key. */
    judge: z.strictObject({ model: Name }).optional(),
  })
  .superRefine((cfg, ctx) => {
    const dup = (items: { name: string }[], path: string) => {
      const seen = new Set<string>();
      items.forEach((item, i) => {
        if (seen.has(item.name))
          ctx.addIssue({
            code: "custom",
            path: [path, i, "name"],
            message: `duplicate name ${JSON.stringify(item.name)}`,
          });
        seen.add(item.name);
      });
    };
    dup(cfg.harnesses, "harnesses");
    cfg.harnesses.forEach((h, i) => {
      // version pins a harness CLI; these adapters have none (their code is evalfleet's or the run's own command).
      if (h.version !== undefined && ["command", "reference", "sim"].includes(h.adapter))
        ctx.addIssue({
          code: "custom",
          path: ["harnesses", i, "version"],
          message: `the ${h.adapter} adapter has no CLI whose version could be pinned; remove version (pin your command's own tools in its settings)`,
        });
    });
    dup(cfg.models, "models");
    const seenTasks = new Set<string>();
    cfg.tasks.forEach((t, i) => {
      if (seenTasks.has(t))
        ctx.addIssue({
          code: "custom",
          path: ["tasks", i],
          message: `duplicate task id ${JSON.stringify(t)}`,
        });
      seenTasks.add(t);
    });
    if (cfg.tasks.includes("*") && cfg.tasks.length > 1)
      ctx.addIssue({
        code: "custom",
        path: ["tasks"],
        message: '"*" selects every task; do not list other ids beside it',
      });
    if (cfg.judge && !cfg.models.some((m) => m.name === cfg.judge?.model))
      ctx.addIssue({
        code: "custom",
        path: ["judge", "model"],
        message: `judge model ${JSON.stringify(cfg.judge.model)} is not in models`,
      });
  });
export type RunConfig = z.output<typeof RunConfigSchema>;
export type RunConfigInput = z.input<typeof RunConfigSchema>;

/** A list, or a JSON-encoded list as the published SWE-bench dataset stores FAIL_TO_PASS / PASS_TO_PASS. */
export const TestList = z.preprocess((v) => {
  if (typeof v !== "string") return v;
  try {
    return JSON.parse(v);
  } catch {
    return v;
  }
}, z.array(z.string()));

/**
 * Task fields that become paths, git arguments, shell words and image references. Each alphabet is what real
 * SWE-bench records use and keeps the value one word that cannot start an option (`-`) or climb a folder (`..`).
 */
const RepoName = z
  .string()
  .regex(
    /^(?!-)(?!\.{1,2}\/)[A-Za-z0-9_.-]{1,100}\/(?!-)(?!\.{1,2}$)[A-Za-z0-9_.-]{1,100}$/,
    "must be owner/name (letters, digits, _ . -), as in SWE-bench records",
  );
const GitRev = z
  .string()
  .regex(
    /^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_./-]{0,254}$/,
    "must be a commit id, tag or branch (letters, digits, _ . / -, not starting with '-', no '..')",
  );
const ImageRef = z
  .string()
  .regex(
    /^[A-Za-z0-9][A-Za-z0-9_./:@+-]{0,511}$/,
    "must be an image reference like registry/name:tag or name@sha256:<digest>",
  );
const RepoPath = z
  .string()
  .min(1)
  .refine(
    (p) => !/^([/\\]|[A-Za-z]:)/.test(p) && !p.split(/[/\\]/).includes("..") && !/[\x00-\x1f]/.test(p),
    "must be a folder inside the task library: a relative path without '..'",
  );

export const TRACKS = ["swe", "open_ended", "multi_phase"] as const;
export type Track = (typeof TRACKS)[number];

export const PhaseSchema = z.strictObject({
  name: Name,
  model_role: z.enum(MODEL_ROLES),
  prompt: z.string().optional(),
});

/**
 * A task: the SWE-bench dataset's own field names where they overlap, so a dataset record is a task as it is, plus
 * evalfleet's `track`, `image`, `phases`, `rubric`, and for tasks shipped with a local repository, `repo_path` and
 * `test_command`.
 */
export const TaskSpecSchema = z
  .object({
    id: Name,
    track: z.enum(TRACKS).default("swe"),
    repo: RepoName.optional(),
    base_commit: GitRev.optional(),
    problem_statement: z.string().default(""),
    FAIL_TO_PASS: TestList.default([]),
    PASS_TO_PASS: TestList.default([]),
    test_patch: z.string().default(""),
    patch: z.string().default(""),
    version: z.union([z.string(), z.number().transform(String)]).nullish(),
    image: ImageRef.optional(),
    phases: z.array(PhaseSchema).optional(),
    rubric: z.string().optional(),
    /** A folder (relative to the task file) holding the repository's files, for tasks shipped with evalfleet. */
    repo_path: RepoPath.optional(),
    /** The command that runs the task's tests in a local checkout (local grading backend). */
    test_command: z.string().optional(),
    instance_id: Name.optional(),
    environment_setup_commit: GitRev.optional(),
    hints_text: z.string().optional(),
    created_at: z.string().optional(),
  })
  .loose()
  .superRefine((t, ctx) => {
    if (t.track === "multi_phase" && (!t.phases || t.phases.length === 0))
      ctx.addIssue({
        code: "custom",
        path: ["phases"],
        message: "a multi_phase task needs at least one phase",
      });
    if (t.track === "open_ended" && !t.rubric)
      ctx.addIssue({
        code: "custom",
        path: ["rubric"],
        message: "an open_ended task needs a rubric for the judge",
      });
  });
export type TaskSpec = z.output<typeof TaskSpecSchema>;

/** True when a multi_phase task has a phase run by a review model. */
export function hasReviewPhase(task: TaskSpec): boolean {
  return task.track === "multi_phase" && (task.phases ?? []).some((p) => p.model_role === "review");
}

/** JSON with object keys sorted at every level: the same value always gives the same text. */
function stableJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(stableJson).join(",")}]`;
  if (v !== null && typeof v === "object")
    return `{${Object.keys(v)
      .sort()
      .filter((k) => (v as Record<string, unknown>)[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${stableJson((v as Record<string, unknown>)[k])}`)
      .join(",")}}`;
  return JSON.stringify(v) ?? "null";
}

/**
 * sha256 of a task spec as validated: gold validation records it, and the planner and the grader compare it with
 * the task as it is now, so a task edited since its validation is noticed before a run, not after.
 */
export function taskSpecHash(task: TaskSpec): string {
  return createHash("sha256").update(stableJson(task)).digest("hex");
}
