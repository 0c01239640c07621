import { readFile } from "node:fs/promises";
import type { Command } from "commander";
import {
  type GradeResult,
  type GradingInstance,
  gradeLog,
  type LogRejection,
  ParserCrash,
  parseGradingInstance,
  pyJsonDumps,
} from "../../grading/index.js";
import { ErrorCode, EvalfleetError, ValidationError } from "../../protocol/errors.js";

/**
 * `evalfleet grade-log`: grade a saved SWE-bench evaluation log exactly as the official harness (v4.x)
 * would, and print its report.json.
 */

async function readInput(file: string, flag: string, what: string): Promise<string> {
  try {
    return await readFile(file, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === "ENOENT" ? "no such file" : code === "EISDIR" ? "is a directory" : String(err);
    throw new ValidationError(ErrorCode.InvalidConfig, `cannot read ${flag} ${file}: ${why}`, [
      { path: flag, reason: `pass the path of ${what}` },
    ]);
  }
}

/** One record from a JSON object, a JSON array or JSONL; several need --instance-id to choose. */
export function pickRecord(text: string, file: string, instanceId?: string): unknown {
  let records: unknown[];
  try {
    const parsed: unknown = JSON.parse(text);
    records = Array.isArray(parsed) ? parsed : [parsed];
  } catch (err) {
    const lines = text.split("\n").filter((l) => l.trim() !== "");
    try {
      if (lines.length < 2) throw err;
      records = lines.map((l) => JSON.parse(l) as unknown);
    } catch {
      throw new ValidationError(ErrorCode.InvalidConfig, `--instance ${file} is not valid JSON`, [
        {
          path: "--instance",
          reason: `${err instanceof Error ? err.message : String(err)}; expected one SWE-bench dataset record (JSON object)`,
        },
      ]);
    }
  }
  const idOf = (r: unknown) =>
    r && typeof r === "object" ? (r as { instance_id?: unknown }).instance_id : undefined;
  if (instanceId !== undefined) {
    const found = records.find((r) => idOf(r) === instanceId);
    if (found === undefined) {
      throw new ValidationError(
        ErrorCode.InvalidConfig,
        `no record with instance_id ${instanceId} in ${file}`,
        [{ path: "--instance-id", reason: `${file} holds ${records.length} record(s)` }],
      );
    }
    return found;
  }
  if (records.length !== 1) {
    throw new ValidationError(ErrorCode.InvalidConfig, `${file} holds ${records.length} records`, [
      { path: "--instance-id", reason: "say which instance the log belongs to" },
    ]);
  }
  return records[0];
}

export interface GradeLogOptions {
  instance: string;
  log: string;
  instanceId?: string;
}

/** Read, validate and grade; returns the instance and the official result. */
export async function gradeLogFiles(
  opts: GradeLogOptions,
): Promise<{ instance: GradingInstance; result: GradeResult }> {
  const text = await readInput(opts.instance, "--instance", "a SWE-bench instance record (JSON)");
  const log = await readInput(opts.log, "--log", "the evaluation log (test_output.txt)");
  const instance = parseGradingInstance(
    pickRecord(text, opts.instance, opts.instanceId),
    `--instance ${opts.instance}`,
  );
  try {
    return { instance, result: gradeLog(instance, log) };
  } catch (err) {
    if (err instanceof ParserCrash) {
      throw new EvalfleetError(
        ErrorCode.Internal,
        `the official ${instance.repo} log parser fails on this log (${err.message}); the harness records such ` +
          "an instance as an error with no report.json — check that --log is this instance's test_output.txt",
      );
    }
    throw err;
  }
}

function rejectionText(r: LogRejection): string {
  if (r.reason === "marker") return `the log contains "${r.marker}"`;
  if (r.reason === "markers_missing") return `the log lacks ${r.missing.map((m) => `"${m}"`).join(" and ")}`;
  return 'the log (a 2.x harness log: no test-output markers) never says "applied patch": the test patch did not apply';
}

function summary(instance: GradingInstance, result: GradeResult): string {
  const entry = result.report[instance.instance_id];
  const ts = entry?.tests_status;
  if (!entry?.patch_successfully_applied || !ts) {
    const why =
      result.logEval && !result.logEval.found ? rejectionText(result.logEval.rejection) : "no patch";
    return `${instance.instance_id}: ${result.status} — not graded: ${why}\n`;
  }
  const count = (k: "FAIL_TO_PASS" | "PASS_TO_PASS") =>
    `${ts[k].success.length}/${ts[k].success.length + ts[k].failure.length}`;
  const failing = [...ts.FAIL_TO_PASS.failure, ...ts.PASS_TO_PASS.failure];
  return (
    `${instance.instance_id}: ${result.status} (FAIL_TO_PASS ${count("FAIL_TO_PASS")}, PASS_TO_PASS ${count("PASS_TO_PASS")})\n` +
    failing.map((t) => `  failing: ${t}\n`).join("")
  );
}

/** Where the command writes; tests pass their own so the test runner's stdout stays untouched. */
export interface CommandIo {
  out(s: string): void;
  err(s: string): void;
}

const processIo: CommandIo = {
  out: (s) => void process.stdout.write(s),
  err: (s) => void process.stderr.write(s),
};

export function register(program: Command, io: CommandIo = processIo): void {
  program
    .command("grade-log")
    .description(
      "Grade a saved SWE-bench evaluation log exactly as the official harness v4.x and print report.json",
    )
    .requiredOption("--instance <file>", "the dataset record: instance_id, repo, FAIL_TO_PASS, PASS_TO_PASS")
    .requiredOption("--log <file>", "the evaluation log (test_output.txt)")
    .option("--instance-id <id>", "which record, when --instance holds several (JSON array or JSONL)")
    .option("--json", "print only report.json (no summary on stderr)")
    .action(async (opts: GradeLogOptions & { json?: boolean }) => {
      const { instance, result } = await gradeLogFiles(opts);
      // Byte-identical to the report.json the harness writes (json.dumps, indent 4).
      io.out(`${pyJsonDumps(result.report)}\n`);
      if (!opts.json) io.err(summary(instance, result));
    });
}
