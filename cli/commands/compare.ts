import { mkdir, writeFile } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import type { Command } from "commander";
import { loadSettings } from "../../config/index.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { buildReport } from "../../report/aggregate.js";
import { buildComparisons, type CompareBy } from "../../report/compare.js";
import { formatCompare } from "../../report/compare-format.js";
import { loadReportInput } from "../../report/load.js";
import { frontierSvg } from "../../report/svg.js";
import { loadCompareInput } from "../../store/compare.js";
import { assertRunExists } from "../../store/report.js";
import { openCliDb } from "./report.js";

interface CompareFlags {
  by?: string;
  json?: boolean;
  plot?: string;
  stateDir?: string;
}

const BY = ["harness", "model"];

export function register(program: Command): void {
  program
    .command("compare")
    .description(
      "Paired comparison on the same tasks: wins / losses / ties, McNemar's exact test, a paired bootstrap on the resolved-rate difference, $/resolved with intervals, and warnings when the compared cells ran under different caps, versions or images",
    )
    .argument("<run-a>", "a run (alone: its harnesses, or models, against each other)")
    .argument("[run-b]", "a second run: run A against run B, matched on harness × model")
    .option(
      "--by <dim>",
      "harness or model: what the arms are (one run), or what they are matched on (two runs)",
    )
    .option("--json", "print the comparison as JSON")
    .option("--plot <file>", "also write the cost-vs-resolved frontier across the runs as SVG")
    .option(
      "--state-dir <dir>",
      "where embedded state (PGlite) lives when DATABASE_URL is unset (default .evalfleet)",
    )
    .action(async (runA: string, runB: string | undefined, flags: CompareFlags) => {
      if (flags.by !== undefined && !BY.includes(flags.by))
        throw new EvalfleetError(ErrorCode.InvalidConfig, `--by must be harness or model, got "${flags.by}"`);
      if (runB === runA)
        throw new EvalfleetError(
          ErrorCode.InvalidConfig,
          `run A and run B are both "${runA}": name two runs, or one run with --by harness|model`,
        );
      const settings = loadSettings("report", { flags: { stateDir: flags.stateDir } });
      const opened = await openCliDb(settings, "compare");
      try {
        const runs = runB === undefined ? [runA] : [runA, runB];
        for (const r of runs) await assertRunExists(opened.db, r, opened.label);
        const inputs = await Promise.all(runs.map((r) => loadCompareInput(opened.db, r)));
        const report = buildComparisons(inputs, flags.by ? { by: flags.by as CompareBy } : {});
        process.stdout.write(flags.json ? `${JSON.stringify(report)}\n` : `${formatCompare(report)}\n`);
        if (flags.plot) {
          const file = resolve(flags.plot);
          const reports = await Promise.all(
            runs.map(async (r) => buildReport(await loadReportInput(opened.db, r))),
          );
          await mkdir(dirname(file), { recursive: true });
          await writeFile(file, frontierSvg(reports));
          process.stderr.write(`plot: ${file}\n`);
        }
      } finally {
        await opened.close();
      }
    });
}
