/**
 * Grading on one machine, decided before the plane takes runs: the task library it serves (the shipped sample by
 * default) is made ready for the planner's gold-validation gate. Where a Docker API answers, each folder task's
 * instance image is built offline and pinned by digest, and the tasks are gold-validated in those images: every
 * patch of a run is then graded in a fresh container from its image. Where none answers (or the images cannot be
 * built), the tasks are validated and graded in checkouts on this host — and the line returned says so.
 */

import { buildGraders } from "../actors/grader-supervisor/actor.js";
import { buildAndRecord, imageResolver } from "../actors/grader-supervisor/image-ops.js";
import type { BackendKind } from "../actors/grader-supervisor/task-job.js";
import { type ValidationOutcome, validateAndRecord } from "../actors/grader-supervisor/validate.js";
import { loadTaskLibrary } from "../actors/planner/library.js";
import type { ImageSettings } from "../config/index.js";
import { ContainerRuntime } from "../containers/index.js";
import type { LibraryImage } from "../images/library.js";
import { pinnedRef } from "../images/resolve.js";
import type { Logger } from "../lib/log.js";
import type { Plane } from "../plane/connect.js";
import { type TaskSpec, taskSpecHash } from "../protocol/config.js";
import { decodeJson } from "../protocol/decode.js";
import { GradeResultSchema } from "../protocol/messages.js";
import { Subjects } from "../protocol/subjects.js";
import { Streams } from "../protocol/topology.js";
import type { Db } from "../store/db.js";
import { getTaskValidations } from "../store/grades.js";

export interface GradingDecision {
  kind: BackendKind;
  /** what grades, in one or more lines for `start` / `up` */
  line: string;
  images: LibraryImage[];
  /** the tasks validated now (those already validated as they are, in the image they would use, are not) */
  validated: ValidationOutcome[];
}

export interface PrepareGradingOptions {
  db: Db;
  /** where the container runtime is found (DOCKER_HOST, else the default sockets) */
  env: Readonly<Record<string, string>>;
  images: ImageSettings;
  libraryDir: string;
  log: Logger;
}

/** Is this task validated as it is now, in the image (or checkout) it would be graded in now? */
function upToDate(
  task: TaskSpec,
  record:
    | { valid: boolean; taskHash?: string | null; imageRef?: string | null; backend?: string | null }
    | undefined,
  imageRef: string | null,
): boolean {
  if (!record?.valid || record.taskHash !== taskSpecHash(task)) return false;
  return imageRef === null
    ? record.backend === "local"
    : record.backend === "docker" && record.imageRef === imageRef;
}

export async function prepareGrading(opts: PrepareGradingOptions): Promise<GradingDecision> {
  const library = await loadTaskLibrary(opts.libraryDir);
  const tasks = [...library.tasks.keys()].sort().map((id) => library.tasks.get(id) as TaskSpec);
  const probe = await ContainerRuntime.probe({ env: opts.env as NodeJS.ProcessEnv, logger: opts.log });
  let rt = probe.ok ? probe.runtime : null;
  let why = probe.ok ? "" : probe.reason;
  let images: LibraryImage[] = [];
  if (rt) {
    try {
      process.stdout.write("grader: building the tasks' instance images (the first time takes a minute)\n");
      images = await buildAndRecord(
        { db: opts.db, rt, settings: opts.images, log: opts.log },
        tasks,
        library.dir,
      );
    } catch (err) {
      why = `the instance images could not be built: ${(err as Error).message}`;
      rt = null;
    }
  }
  const ctx = { db: opts.db, rt, settings: opts.images, log: opts.log };
  const resolve = imageResolver(ctx);
  const records = await getTaskValidations(
    opts.db,
    tasks.map((t) => t.id),
  );
  const stale: TaskSpec[] = [];
  for (const t of tasks) {
    if (t.track === "open_ended") continue;
    const image = await resolve(t).catch(() => undefined);
    if (image === undefined || !upToDate(t, records.get(t.id), image ? pinnedRef(image) : null))
      stale.push(t);
  }
  const graders = buildGraders(
    { log: opts.log, env: opts.env, ...(rt ? { containers: rt } : {}) },
    undefined,
  );
  const validated =
    stale.length === 0
      ? []
      : await validateAndRecord(opts.db, stale, { graders, libraryDir: library.dir, resolveImage: resolve });
  const invalid = validated
    .filter((v) => v.verdict === "invalid" || v.verdict === "error")
    .map((v) =>
      v.verdict === "invalid"
        ? `\n  validation: ${v.taskId} is INVALID (runs naming it are refused): ${v.reason}`
        : `\n  validation: ${v.taskId} could not be validated (runs naming it are refused until it is; the next start tries again): ${v.reason}`,
    );
  const where = opts.images.registry
    ? `pushed to ${opts.images.registry}`
    : "in this daemon, pinned by image id";
  const line = rt
    ? `grader: docker — every patch graded in a fresh container (no network, memory / CPU / pids limits) from its task's image pinned by digest, ${images.length} built ${where}; ${validated.length} task(s) gold-validated in them now, ${stale.length === 0 ? "all" : "the others"} already`
    : `grader: checkout — patches graded as processes of this user in a copy of each task's folder on this host (${why}); start Docker and debootstrap the base rootfs (EVALFLEET_BASE_ROOTFS) to grade in containers`;
  return { kind: rt ? "docker" : "local", line: `${line}${invalid.join("")}`, images, validated };
}

/**
 * Where a run's patches were graded, from its grade results (grade.results.<run>): counts per grader (`docker`,
 * `local`, `unknown` for results that do not say).
 */
export async function gradedBy(plane: Plane, run: string): Promise<Record<string, number>> {
  const subject = Subjects.gradeResults.one(run);
  const info = await plane.jsm.streams.info(Streams.gradeResults.name, { subjects_filter: subject });
  const n = Object.values(info.state.subjects ?? {}).reduce((a, b) => a + b, 0);
  const out: Record<string, number> = {};
  if (n === 0) return out;
  const c = await plane.js.consumers.get(Streams.gradeResults.name, { filter_subjects: subject });
  let seen = 0;
  while (seen < n) {
    let got = 0;
    for await (const m of await c.fetch({ max_messages: n - seen, expires: 2_000 })) {
      const g = decodeJson(GradeResultSchema, m.data, "grade result");
      const k = g.status === "INFRA_FAILURE" ? "infrastructure failure" : (g.grader ?? "unknown");
      out[k] = (out[k] ?? 0) + 1;
      got++;
    }
    seen += got;
    if (got === 0) break;
  }
  return out;
}
