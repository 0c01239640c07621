/**
 * Gold validation: before a run, grade each task's gold patch and the empty patch in the environment the run will
 * use. The gold patch must resolve the task and the empty patch must not; otherwise the task measures nothing and
 * is marked invalid (with the reason), and the planner refuses runs on it. What it was validated in is recorded:
 * the image (name@digest) and which grader, with a hash of the task as it was, so grading later uses the same
 * image and a task changed since is not taken as validated.
 */

import type { InstanceReport } from "../../grading/index.js";
import { prepullManifest } from "../../images/library.js";
import { type PinnedImage, pinnedRef } from "../../images/resolve.js";
import { type TaskSpec, taskSpecHash } from "../../protocol/config.js";
import { ValidationError } from "../../protocol/errors.js";
import type { Db } from "../../store/db.js";
import { saveTaskValidation } from "../../store/grades.js";
import type { GradeBackend, GradeOutcome } from "./backends/types.js";
import { type BackendKind, type PrepareOptions, prepareTaskJob } from "./task-job.js";

export interface ValidationOutcome {
  taskId: string;
  /** "skipped": open_ended tasks are judged, there is nothing to validate. */
  /** error: the environment failed (after the grader's retries), so nothing is known of the task: not recorded */
  verdict: "valid" | "invalid" | "skipped" | "error";
  reason: string | null;
  imageDigest: string | null;
  backend: BackendKind | null;
  /** docker: the image name (validated at imageDigest); the eval-host AMI pre-pulls name@digest. */
  image?: string;
  instanceId?: string;
  /** taskSpecHash of the task validated */
  taskHash?: string;
}

export interface ValidateOptions extends Omit<PrepareOptions, "emptyPatch" | "validatedDigest" | "image"> {
  graders: Record<BackendKind, GradeBackend>;
  signal?: AbortSignal;
  /**
   * The image a task is graded in when its file pins none: a folder task's built image (null: graded in a checkout
   * on this host), a SWE-bench task's mirror or its image pulled and pinned. Throws when it cannot be had: the task
   * is then invalid, the error its reason.
   */
  resolveImage?: (task: TaskSpec) => Promise<PinnedImage | null>;
}

function failingTests(outcome: GradeOutcome, instanceId: string): string {
  if (outcome.kind !== "graded") return "";
  const ts = (outcome.report[instanceId] as InstanceReport | undefined)?.tests_status;
  if (!ts) return "";
  const lists = [
    ts.FAIL_TO_PASS.failure.length ? `FAIL_TO_PASS failing: ${ts.FAIL_TO_PASS.failure.join(", ")}` : "",
    ts.PASS_TO_PASS.failure.length ? `PASS_TO_PASS failing: ${ts.PASS_TO_PASS.failure.join(", ")}` : "",
  ].filter(Boolean);
  return lists.length ? ` (${lists.join("; ")})` : "";
}

function describe(outcome: GradeOutcome, instanceId: string): string {
  if (outcome.kind === "graded") return `${outcome.status}${failingTests(outcome, instanceId)}`;
  if (outcome.kind === "not_graded") return `${outcome.reason}: ${outcome.detail.trim().slice(0, 500)}`;
  return `environment failure (${outcome.failure.kind}) after ${outcome.attempts} attempt(s): ${outcome.failure.message}`;
}

/** Grade the gold and the empty patch of one task; does not write anything. */
export async function validateTask(task: TaskSpec, opts: ValidateOptions): Promise<ValidationOutcome> {
  const none = { taskId: task.id, imageDigest: null, backend: null, taskHash: taskSpecHash(task) } as const;
  if (task.track === "open_ended")
    return { ...none, verdict: "skipped", reason: "open_ended: judged, not graded" };
  if (task.patch.trim() === "") return { ...none, verdict: "invalid", reason: "the task has no gold patch" };
  let image: PinnedImage | null = null;
  try {
    image = (await opts.resolveImage?.(task)) ?? null;
  } catch (err) {
    return { ...none, verdict: "invalid", reason: `environment: ${(err as Error).message}` };
  }
  const signal = opts.signal ?? new AbortController().signal;
  const prep = { ...opts, emptyPatch: "run" as const, image };
  let gold: Awaited<ReturnType<typeof prepareTaskJob>>;
  try {
    gold = await prepareTaskJob(task, task.patch, prep);
  } catch (err) {
    if (!(err instanceof ValidationError)) throw err;
    return { ...none, verdict: "invalid", reason: err.issues.map((i) => i.reason).join("; ") || err.message };
  }
  const grader = opts.graders[gold.backend];
  const id = gold.job.instance.instance_id;
  const at = {
    taskId: task.id,
    taskHash: none.taskHash,
    imageDigest: gold.imageDigest,
    backend: gold.backend,
    instanceId: id,
    ...(gold.backend === "docker" && gold.job.image ? { image: gold.job.image.name } : {}),
  };
  const goldOutcome = await grader.grade(gold.job, signal);
  // An environment that failed says nothing of the task: it is left unvalidated, to be tried again, never marked
  // invalid for what the machine did.
  if (goldOutcome.kind === "infra_failure")
    return { ...at, verdict: "error", reason: `not validated: gold patch: ${describe(goldOutcome, id)}` };
  if (goldOutcome.kind !== "graded" || goldOutcome.status !== "RESOLVED_FULL") {
    return {
      ...at,
      verdict: "invalid",
      reason: `gold patch does not resolve the task: ${describe(goldOutcome, id)}`,
    };
  }
  const emptyOutcome = await grader.grade({ ...gold.job, patch: "" }, signal);
  if (emptyOutcome.kind === "infra_failure")
    return { ...at, verdict: "error", reason: `not validated: empty patch: ${describe(emptyOutcome, id)}` };
  if (emptyOutcome.resolved) {
    return {
      ...at,
      verdict: "invalid",
      reason: "the empty patch already resolves the task: its FAIL_TO_PASS tests pass without any change",
    };
  }
  return { ...at, verdict: "valid", reason: null };
}

/** Validate and record in task_validation (open_ended tasks are reported, not recorded). */
export async function validateAndRecord(
  db: Db,
  tasks: readonly TaskSpec[],
  opts: ValidateOptions & { onResult?: (r: ValidationOutcome) => void; concurrency?: number },
): Promise<ValidationOutcome[]> {
  const out: ValidationOutcome[] = new Array(tasks.length);
  let next = 0;
  // A few tasks at a time: each grade is minutes in an image, and the eval host has room for several.
  const worker = async () => {
    for (let i = next++; i < tasks.length; i = next++) {
      const r = await validateTask(tasks[i] as TaskSpec, opts);
      if (r.verdict === "valid" || r.verdict === "invalid") {
        await saveTaskValidation(db, {
          taskId: r.taskId,
          valid: r.verdict === "valid",
          reason: r.reason,
          imageDigest: r.imageDigest,
          imageRef:
            r.backend === "docker" && r.image && r.imageDigest
              ? pinnedRef({ name: r.image, digest: r.imageDigest })
              : null,
          backend: r.backend,
          taskHash: r.taskHash ?? null,
        });
      }
      opts.onResult?.(r);
      out[i] = r;
    }
  };
  await Promise.all(
    Array.from({ length: Math.max(1, Math.min(opts.concurrency ?? 1, tasks.length)) }, worker),
  );
  return out;
}

/**
 * The manifest the eval-host AMI build pre-pulls (packer/files/prepull.sh): every valid docker task's image,
 * pinned by the digest it was validated on.
 */
export function imageManifest(results: readonly ValidationOutcome[]): {
  generated_by: string;
  images: Array<{ instance_id: string; image: string }>;
} {
  return prepullManifest(
    results
      .filter((r) => r.verdict === "valid" && r.backend === "docker" && r.image && r.imageDigest)
      .map((r) => ({ instance_id: r.instanceId ?? r.taskId, image: `${r.image}@${r.imageDigest}` })),
    "gold validation (evalfleet validate-env)",
  );
}
