/**
 * Gold validation: before a run, grade each task's gold patch and the empty patch in the environment the run will
 * use. The gold patch must resolve the task and the empty patch must not; otherwise the task measures nothing and
 * is marked invalid (with the reason) so runs leave it out. The digest it was validated on is recorded.
 */
import type { TaskSpec } from "../../protocol/config.js";
import { ValidationError } from "../../protocol/errors.js";
import type { Db } from "../../store/db.js";
import { run } from "./backends/exec.js";
import type { GradeBackend, GradeOutcome } from "./backends/types.js";
import type { InstanceReport } from "./grading/index.js";
import { saveTaskValidation } from "./records.js";
import { type BackendKind, isLocalTask, type PrepareOptions, prepareTaskJob } from "./task-job.js";

export interface ValidationOutcome {
  taskId: string;
  /** "skipped": open_ended tasks are judged, there is nothing to validate. */
  verdict: "valid" | "invalid" | "skipped";
  reason: string | null;
  imageDigest: string | null;
  backend: BackendKind | null;
  /** docker: the image name (validated at imageDigest); the eval-host AMI pre-pulls name@digest. */
  image?: string;
  instanceId?: string;
}

export interface ValidateOptions extends Omit<PrepareOptions, "emptyPatch" | "validatedDigest"> {
  graders: Record<BackendKind, GradeBackend>;
  signal?: AbortSignal;
  /** Resolves a docker image's digest when the task pins none (default: `docker image inspect`). */
  resolveDigest?: (image: string) => Promise<string>;
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

/** `docker image inspect` → the first repo digest (`sha256:…`), pulling the image first when it is missing. */
export function dockerDigestResolver(dockerPath = "docker"): (image: string) => Promise<string> {
  return async (image) => {
    const inspect = () => run(dockerPath, ["image", "inspect", "--format", "{{json .RepoDigests}}", image]);
    let r = await inspect();
    if (r.code !== 0) {
      const pulled = await run(dockerPath, ["pull", image], { timeoutMs: 1_800_000 });
      if (pulled.code !== 0) throw new Error(`docker pull ${image} failed: ${pulled.stderr.trim()}`);
      r = await inspect();
    }
    const digests = r.code === 0 ? (JSON.parse(r.stdout.trim() || "[]") as string[]) : [];
    const digest = digests
      .map((d) => d.slice(d.indexOf("@") + 1))
      .find((d) => /^sha256:[0-9a-f]{64}$/.test(d));
    if (!digest) throw new Error(`image ${image} has no repository digest`);
    return digest;
  };
}

/** Grade the gold and the empty patch of one task; does not write anything. */
export async function validateTask(task: TaskSpec, opts: ValidateOptions): Promise<ValidationOutcome> {
  const none = { taskId: task.id, imageDigest: null, backend: null } as const;
  if (task.track === "open_ended")
    return { ...none, verdict: "skipped", reason: "open_ended: judged, not graded" };
  if (task.patch.trim() === "") return { ...none, verdict: "invalid", reason: "the task has no gold patch" };
  let validatedDigest: string | null = null;
  try {
    if (!isLocalTask(task) && task.image !== undefined && !task.image.includes("@")) {
      validatedDigest = await (opts.resolveDigest ?? dockerDigestResolver())(task.image);
    }
  } catch (err) {
    return { ...none, verdict: "invalid", reason: `environment: ${(err as Error).message}` };
  }
  const signal = opts.signal ?? new AbortController().signal;
  const prep = { ...opts, emptyPatch: "run" as const, validatedDigest };
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
    imageDigest: gold.imageDigest,
    backend: gold.backend,
    instanceId: id,
    ...(gold.backend === "docker" && gold.job.image ? { image: gold.job.image.name } : {}),
  };
  const goldOutcome = await grader.grade(gold.job, signal);
  if (goldOutcome.kind !== "graded" || goldOutcome.status !== "RESOLVED_FULL") {
    return {
      ...at,
      verdict: "invalid",
      reason: `gold patch does not resolve the task: ${describe(goldOutcome, id)}`,
    };
  }
  const emptyOutcome = await grader.grade({ ...gold.job, patch: "" }, signal);
  if (emptyOutcome.kind === "infra_failure") {
    return { ...at, verdict: "invalid", reason: `empty patch: ${describe(emptyOutcome, id)}` };
  }
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
      if (r.verdict !== "skipped") {
        await saveTaskValidation(db, {
          taskId: r.taskId,
          valid: r.verdict === "valid",
          reason: r.reason,
          imageDigest: r.imageDigest,
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
  images: Array<{ instance_id: string; image: string }>;
} {
  const images = results
    .filter((r) => r.verdict === "valid" && r.backend === "docker" && r.image && r.imageDigest)
    .map((r) => ({ instance_id: r.instanceId ?? r.taskId, image: `${r.image}@${r.imageDigest}` }));
  return { images };
}

export { getTaskValidation, invalidTaskIds } from "./records.js";
