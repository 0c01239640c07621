import { mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { type OpenedDb, openDatabase } from "../../actors/runtime/main.js";
import { type DatabaseSettings, type LogLevel, loadSettings } from "../../config/index.js";
import { createLogger } from "../../lib/log.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { buildReport } from "../../report/aggregate.js";
import { formatCsv, formatJson, formatTable } from "../../report/format.js";
import { loadReportInput } from "../../report/load.js";
import { buildPredictions, predictionsJsonl } from "../../report/predictions.js";
import { resolvedVsCostSvg, spendOverTimeSvg } from "../../report/svg.js";
import { assertRunExists, loadPredictionSources } from "../../store/report.js";
import { openBlobReader } from "./blobs.js";

/**
 * The results database a CLI command reads (its settings: PostgreSQL, else the embedded PGlite that `evalfleet
 * start` / `up` keep under <state-dir>/pglite — config/ has checked it exists). PGlite is single-process: read it
 * while the plane is stopped, or use PostgreSQL.
 */
export async function openCliDb(
  s: { database: DatabaseSettings; log: { level: LogLevel } },
  command: string,
): Promise<OpenedDb> {
  const log = createLogger({ name: "evalfleet", level: s.log.level });
  return await openDatabase(s.database, { command, log });
}

interface ReportFlags {
  format: string;
  json?: boolean;
  export?: string;
  plots?: string;
  k?: string;
  harness?: string;
  model?: string;
  repeat?: string;
  stateDir?: string;
}

const FORMATS = ["table", "csv", "json"];

function positiveInt(v: string | undefined, flag: string): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 0)
    throw new EvalfleetError(ErrorCode.InvalidConfig, `${flag} must be a whole number, got "${v}"`);
  return n;
}

export function register(program: Command): void {
  program
    .command("report")
    .description(
      "Per harness × model: resolved rate (pass@1, pass@k, 95% Wilson CI), cost from the ledger, tokens, latency, errors",
    )
    .argument("<run>", "run name (see `evalfleet status`)")
    .option("--format <format>", "table, csv or json", "table")
    .option("--json", "same as --format json")
    .option("--k <k>", "k for pass@k (default: the most repeats any task has)")
    .option(
      "--export <file>",
      "write predictions.jsonl in the SWE-bench format (instance_id, model_name_or_path, model_patch)",
    )
    .option("--harness <name>", "--export only this harness")
    .option("--model <name>", "--export only this model")
    .option(
      "--repeat <n>",
      "--export only this repeat (the official harness keeps one prediction per instance)",
    )
    .option("--plots <dir>", "write resolved-vs-cost.svg and spend-over-time.svg into this folder")
    .option(
      "--state-dir <dir>",
      "where embedded state (PGlite) lives when DATABASE_URL is unset (default .evalfleet)",
    )
    .action(async (run: string, flags: ReportFlags) => {
      const settings = loadSettings("report", { flags });
      const format = flags.json ? "json" : flags.format;
      if (!FORMATS.includes(format))
        throw new EvalfleetError(
          ErrorCode.InvalidConfig,
          `--format must be one of ${FORMATS.join(", ")}, got "${format}"`,
        );
      const k = positiveInt(flags.k, "--k");
      if (k === 0) throw new EvalfleetError(ErrorCode.InvalidConfig, "--k must be at least 1");
      const repeat = positiveInt(flags.repeat, "--repeat");
      const opened = await openCliDb(settings, "report");
      const { db, label } = opened;
      try {
        await assertRunExists(db, run, label);
        const report = buildReport({ ...(await loadReportInput(db, run)), ...(k ? { k } : {}) });
        if (format === "json") process.stdout.write(`${formatJson(report)}\n`);
        else if (format === "csv") process.stdout.write(formatCsv(report));
        else process.stdout.write(`${formatTable(report)}\n`);
        if (flags.plots) {
          const dir = resolve(flags.plots);
          await mkdir(dir, { recursive: true });
          await writeFile(join(dir, "resolved-vs-cost.svg"), resolvedVsCostSvg(report));
          await writeFile(join(dir, "spend-over-time.svg"), spendOverTimeSvg(report));
          process.stderr.write(
            `plots: ${join(dir, "resolved-vs-cost.svg")}, ${join(dir, "spend-over-time.svg")}\n`,
          );
        }
        if (flags.export) {
          const sources = await loadPredictionSources(db, run);
          const needBlobs = sources.some((s) => s.patchRef !== null && s.diff === null);
          const patches = needBlobs
            ? await openBlobReader(settings, "report")
            : { get: async () => null, close: async () => {} };
          try {
            const out = await buildPredictions(sources, patches.get, {
              ...(flags.harness ? { harness: flags.harness } : {}),
              ...(flags.model ? { model: flags.model } : {}),
              ...(repeat !== undefined ? { repeat } : {}),
            });
            await writeFile(flags.export, predictionsJsonl(out.predictions));
            process.stderr.write(`predictions: ${out.predictions.length} written to ${flags.export}\n`);
            if (out.missing.length > 0) {
              // An empty patch would be graded unresolved: a silent export would misstate the result.
              process.stderr.write(
                `error: ${out.missing.length} patch(es) could not be read from the object store and have no ` +
                  `run_results.diff; they are exported as empty (${out.missing.slice(0, 3).join(", ")}${
                    out.missing.length > 3 ? ", …" : ""
                  }). Run with NATS_URL pointing at the plane that ran ${run}.\n`,
              );
              process.exitCode = 1;
            }
            if (out.duplicates.length > 0)
              process.stderr.write(
                `warning: ${out.duplicates.length} instance id(s) appear more than once (several harnesses, models or repeats); ` +
                  "the official harness keeps one per instance — narrow with --harness, --model and --repeat\n",
              );
          } finally {
            await patches.close();
          }
        }
      } finally {
        await opened.close();
      }
    });
}
