/**
 * Grading in a local checkout with bash: the same patch-apply chain, the same markers and the same
 * official grading, without containers. For evalfleet's own repository tasks and hosts without docker.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { APPLY_PATCH_COMMANDS, DEFAULT_TIMEOUT_S, makeLocalEvalScript } from "../../../grading/index.js";
import type { Logger } from "../../../lib/log.js";
import { silentLogger } from "../../../lib/log.js";
import { run } from "../../../lib/run.js";
import { ErrorCode, EvalfleetError, ValidationError } from "../../../protocol/errors.js";
import { withoutSecrets } from "../../../protocol/redact.js";
import { isEmptyPatch, outcomeFromLog, parserForJob, skipEmptyPatch } from "./common.js";
import type { GradeBackend, GradeJob, GradeOutcome } from "./types.js";
import { infraFailure, mentionsOutOfDisk } from "./types.js";

export interface LocalBackendOptions {
  bashPath?: string;
  defaultTimeoutS?: number;
  logger?: Logger;
  /**
   * Environment for the eval script (this process's, from its settings), used without secrets: the script runs
   * the harness's patched code, which could print them into the test output.
   */
  env: Readonly<Record<string, string | undefined>>;
}

export function createLocalBackend(opts: LocalBackendOptions): GradeBackend {
  const bash = opts.bashPath ?? "bash";
  const log = opts.logger ?? silentLogger();
  const env = withoutSecrets(opts.env);

  function aborted(): never {
    throw new EvalfleetError(ErrorCode.Unavailable, "grading aborted", { retryable: true });
  }

  async function grade(job: GradeJob, signal: AbortSignal): Promise<GradeOutcome> {
    const skipped = skipEmptyPatch(job);
    if (skipped) return skipped;
    const dir = job.checkoutDir;
    if (!dir) {
      throw new ValidationError(ErrorCode.InvalidMessage, "local grading needs a checkout", [
        { path: "checkoutDir", reason: "a disposable checkout of the repository at base_commit" },
      ]);
    }
    parserForJob(job); // fail on an unknown log format before touching the checkout
    const script = makeLocalEvalScript(
      job.instance,
      job.testCmd === undefined ? { repoDir: dir } : { repoDir: dir, testCmd: job.testCmd },
    );
    const timeoutS = job.timeoutS ?? opts.defaultTimeoutS ?? DEFAULT_TIMEOUT_S;
    let work: string | undefined;
    try {
      work = await mkdtemp(path.join(tmpdir(), "evalfleet-local-grade-"));
      if (!isEmptyPatch(job.patch)) {
        const patchFile = path.join(work, "patch.diff");
        await writeFile(patchFile, job.patch ?? "");
        let applied = false;
        let output = "";
        for (const cmd of APPLY_PATCH_COMMANDS) {
          const [bin, ...args] = cmd as [string, ...string[]];
          const r = await run(bin, [...args, patchFile], { cwd: dir, env, signal, timeoutMs: 300_000 });
          if (r.aborted) aborted();
          if (r.code === 0) {
            applied = true;
            break;
          }
          output = r.combined || (r.spawnError?.message ?? "");
        }
        if (!applied) {
          log.info({ instance: job.instance.instance_id, output }, "patch apply failed");
          return { kind: "not_graded", resolved: false, reason: "patch_apply_failed", detail: output };
        }
      }
      const scriptFile = path.join(work, "eval.sh");
      await writeFile(scriptFile, script);
      const r = await run(bash, [scriptFile], { cwd: dir, env, signal, timeoutMs: timeoutS * 1000 });
      if (r.aborted) aborted();
      if (r.spawnError) return infraFailure("runtime", `cannot run ${bash}: ${r.spawnError.message}`);
      if (r.timedOut) return infraFailure("timeout", `tests exceeded ${timeoutS} s`);
      return outcomeFromLog(job, r.combined, "");
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ENOSPC" || (err instanceof Error && mentionsOutOfDisk(err.message))) {
        return infraFailure("out_of_disk", (err as Error).message);
      }
      throw err;
    } finally {
      if (work) await rm(work, { recursive: true, force: true });
    }
  }

  return { name: "local", grade };
}
