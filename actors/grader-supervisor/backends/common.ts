/** Steps both backends share: the empty-patch rule and turning a test log into an outcome. */

import {
  END_TEST_OUTPUT,
  gradeLog,
  type LogParser,
  logGeneration,
  MAP_REPO_TO_PARSER,
  PARSERS_BY_FORMAT,
  ParserCrash,
  START_TEST_OUTPUT,
} from "../../../grading/index.js";
import { ErrorCode, ValidationError } from "../../../protocol/errors.js";
import type { GradeJob, GradeOutcome } from "./types.js";
import { infraFailure, mentionsOutOfDisk } from "./types.js";

/** Empty patches are skipped unless the job asks to run them (gold validation). */
export function skipEmptyPatch(job: GradeJob): GradeOutcome | null {
  const empty = job.patch === null || job.patch === "";
  if (!empty || job.emptyPatch === "run") return null;
  return { kind: "not_graded", resolved: false, reason: "empty_patch", detail: "empty patch: not evaluated" };
}

export function isEmptyPatch(patch: string | null): boolean {
  return patch === null || patch === "";
}

/** The official parser for the repo, else the job's declared log format. */
export function parserForJob(job: GradeJob): LogParser {
  // Own keys only: a repo or log_format named `constructor` must not find Object's.
  if (Object.hasOwn(MAP_REPO_TO_PARSER, job.instance.repo)) return MAP_REPO_TO_PARSER[job.instance.repo]!;
  if (job.logFormat !== undefined && Object.hasOwn(PARSERS_BY_FORMAT, job.logFormat))
    return PARSERS_BY_FORMAT[job.logFormat]!;
  throw new ValidationError(ErrorCode.InvalidMessage, `no log parser for ${job.instance.repo}`, [
    {
      path: "logFormat",
      reason: `repository is not in the official map; set one of: ${Object.keys(PARSERS_BY_FORMAT).join(", ")}`,
    },
  ]);
}

/**
 * Grade a finished eval run. A log cut short by the environment (out of disk, runtime errors, before
 * the end marker) is an infrastructure failure, not the model's; a complete log is graded officially.
 */
export function outcomeFromLog(job: GradeJob, testOutput: string, runtimeNoise: string): GradeOutcome {
  // A 2.x log has no markers by design: it is complete as it is.
  const complete =
    (testOutput.includes(START_TEST_OUTPUT) && testOutput.includes(END_TEST_OUTPUT)) ||
    logGeneration(testOutput) === "2.x";
  if (!complete && mentionsOutOfDisk(testOutput + runtimeNoise)) {
    return infraFailure("out_of_disk", "the eval run stopped early: no space left on device");
  }
  try {
    const { report, status } = gradeLog(job.instance, testOutput, {
      // A null patch only reaches here in emptyPatch "run" mode, where the tests are what matters.
      patch: job.patch ?? "",
      parser: parserForJob(job),
    });
    const entry = report[job.instance.instance_id];
    return { kind: "graded", resolved: entry?.resolved ?? false, status, report, testOutput };
  } catch (err) {
    if (err instanceof ParserCrash) {
      return { kind: "not_graded", resolved: false, reason: "harness_error", detail: err.message };
    }
    throw err;
  }
}
