import {
  type HarnessSpec,
  hasReviewPhase,
  type ModelSpec,
  type RunConfig,
  type TaskSpec,
} from "../../protocol/config.js";
import { ErrorCode, EvalfleetError, type Issue, ValidationError } from "../../protocol/errors.js";
import { wireModelId } from "../../providers/run-prices.js";

/** One cell of the matrix: a harness, a model (and maybe a review model), a task and a repeat index. */
export interface Cell {
  cellId: string;
  harness: HarnessSpec;
  model: ModelSpec;
  reviewModel: ModelSpec | null;
  task: TaskSpec;
  repeat: number;
  /** the gateway trace id: the cell id itself for single-phase cells */
  traceId: string;
  /** per-phase trace ids `{cell_id}__phase-{name}` for multi_phase tasks, in phase order */
  phaseTraceIds: readonly string[];
  pool: string;
  /** all-or-nothing budget exemption (the seed's three rules) */
  exempt: boolean;
}

/**
 * The frozen cell-id format: `{harness}__{model}__{task}__r{repeat}`, plus `__rev-{review}` for a multi_phase task
 * with a review phase.
 */
export function cellIdOf(
  harness: string,
  model: string,
  task: string,
  repeat: number,
  review?: string,
): string {
  const base = `${harness}__${model}__${task}__r${repeat}`;
  return review === undefined ? base : `${base}__rev-${review}`;
}

/** The cell-id prefixes (`harness__model__`) of one pool's cells: every harness with each model of that pool. */
export function poolCellPrefixes(config: RunConfig, pool: string): string[] {
  const models = config.models.filter((m) => wireModelId(m) === pool);
  return config.harnesses.flatMap((h) => models.map((m) => `${h.name}__${m.name}__`));
}

/** Per-phase trace id: `{cell_id}__phase-{phase}`. */
export function phaseTraceId(cellId: string, phase: string): string {
  return `${cellId}__phase-${phase}`;
}

/**
 * A cell is budget-exempt only when the implementation model is subscription, the review model (if any) is also
 * subscription, and the task is not open_ended (the judge's calls are platform-billed).
 */
export function isExempt(model: ModelSpec, reviewModel: ModelSpec | null, task: TaskSpec): boolean {
  return (
    model.cost_mode === "subscription" &&
    (reviewModel === null || reviewModel.cost_mode === "subscription") &&
    task.track !== "open_ended"
  );
}

/**
 * Expand harness × model × task × repeat exactly as the seed does: harness outer, then task; swe / open_ended tasks
 * take every model; a multi_phase task with a review phase takes implementation × review pairs and raises (as the
 * seed's ValueError) when either role has no model; a multi_phase task without one takes implementation models.
 */
export function buildMatrix(config: RunConfig, tasks: readonly TaskSpec[]): Cell[] {
  const implModels = config.models.filter((m) => m.role === "implementation");
  const reviewModels = config.models.filter((m) => m.role === "review");
  const cells: Cell[] = [];
  // The pacer pool is the model as the provider knows it: its limits are per key and model, so every harness (and
  // the judge) calling one model shares one pool, the one the gateway paces and fleet sizing reads.
  const pools = new Map(config.models.map((m) => [m, wireModelId(m)]));
  for (const harness of config.harnesses) {
    for (const task of tasks) {
      if (task.track === "multi_phase" && hasReviewPhase(task)) {
        if (implModels.length === 0)
          throw new EvalfleetError(
            ErrorCode.MatrixInvalid,
            `task ${task.id} is multi_phase with a review phase, but no model has role: implementation — add one to models`,
          );
        if (reviewModels.length === 0)
          throw new EvalfleetError(
            ErrorCode.MatrixInvalid,
            `task ${task.id} is multi_phase with a review phase, but no model has role: review — add one to models`,
          );
        for (const model of implModels)
          for (const review of reviewModels)
            for (let r = 0; r < config.repeats; r++)
              cells.push(makeCell(harness, model, review, task, r, pools.get(model)!));
      } else {
        const models = task.track === "multi_phase" ? implModels : config.models;
        for (const model of models)
          for (let r = 0; r < config.repeats; r++)
            cells.push(makeCell(harness, model, null, task, r, pools.get(model)!));
      }
    }
  }
  assertDistinctCellIds(config, tasks, cells);
  return cells;
}

/**
 * Names may contain `__`, so two different cells can join to one id (harness `a__b` × model `c` and harness `a`
 * × model `b__c`). They would share a row, a job key and a message id, and one would silently never run: refuse.
 */
function assertDistinctCellIds(config: RunConfig, tasks: readonly TaskSpec[], cells: readonly Cell[]): void {
  if (distinctByConstruction(config, tasks)) return;
  const first = new Map<string, Cell>();
  const issues: Issue[] = [];
  for (const c of cells) {
    const prev = first.get(c.cellId);
    if (!prev) {
      first.set(c.cellId, c);
      continue;
    }
    const path =
      prev.harness !== c.harness
        ? `harnesses[${config.harnesses.indexOf(c.harness)}].name`
        : prev.model !== c.model
          ? `models[${config.models.indexOf(c.model)}].name`
          : prev.reviewModel !== c.reviewModel && c.reviewModel
            ? `models[${config.models.indexOf(c.reviewModel)}].name`
            : "tasks";
    const what = (x: Cell) =>
      `${x.harness.name} × ${x.model.name}${x.reviewModel ? ` (review ${x.reviewModel.name})` : ""} × ${x.task.id}`;
    issues.push({
      path,
      reason: `${what(prev)} and ${what(c)} both make cell id ${c.cellId}; rename one so the names joined with '__' differ`,
    });
    if (issues.length >= 10) break;
  }
  if (issues.length > 0)
    throw new ValidationError(ErrorCode.MatrixInvalid, "two cells of the matrix would share one id", issues);
}

/**
 * `{harness}__{model}__{task}__r{n}` reads back unambiguously when each list's names are distinct and no harness or
 * model name holds `__` or starts or ends with `_`: the first two `__` then end the harness and the model, and the
 * repeat is the digits after the last `__r`. Such a matrix has distinct ids without hashing every one of them (a
 * 172,050-cell matrix spent most of its expansion on that). Review cells append a name, so they take the full check.
 */
function distinctByConstruction(config: RunConfig, tasks: readonly TaskSpec[]): boolean {
  const plain = (names: readonly string[]) =>
    new Set(names).size === names.length &&
    names.every((n) => !n.includes("__") && !n.startsWith("_") && !n.endsWith("_"));
  return (
    plain(config.harnesses.map((h) => h.name)) &&
    plain(config.models.map((m) => m.name)) &&
    new Set(tasks.map((t) => t.id)).size === tasks.length &&
    !tasks.some((t) => t.track === "multi_phase" && hasReviewPhase(t))
  );
}

/** Shared by every single-phase cell: one allocation fewer per cell of a large matrix. */
const NO_PHASES: readonly string[] = Object.freeze([]);

function makeCell(
  harness: HarnessSpec,
  model: ModelSpec,
  review: ModelSpec | null,
  task: TaskSpec,
  repeat: number,
  pool: string,
): Cell {
  const cellId = cellIdOf(harness.name, model.name, task.id, repeat, review?.name);
  return {
    cellId,
    harness,
    model,
    reviewModel: review,
    task,
    repeat,
    traceId: cellId,
    phaseTraceIds:
      task.track === "multi_phase" ? (task.phases ?? []).map((p) => phaseTraceId(cellId, p.name)) : NO_PHASES,
    pool,
    exempt: isExempt(model, review, task),
  };
}
