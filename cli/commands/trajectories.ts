import { mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { loadSettings } from "../../config/index.js";
import { attemptTrajectories } from "../../report/trajectories.js";
import { assertRunExists } from "../../store/report.js";
import { getRunMetadata } from "../../store/results.js";
import { loadTrajectoryCalls, loadTrajectoryCells } from "../../store/trajectories.js";
import { openBlobReader } from "./blobs.js";
import { openCliDb } from "./report.js";

interface TrajectoriesFlags {
  out: string;
  cell?: string;
  stateDir?: string;
}

function parseConfig(json: string | undefined): Record<string, unknown> | null {
  try {
    return json ? (JSON.parse(json) as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

export function register(program: Command): void {
  program
    .command("trajectories")
    .description(
      "Write one ATIF trajectory (Harbor's Agent Trajectory Interchange Format) per attempt: a step per model call with its tokens, cost, latency and pacer wait from the ledger, and the harness's own messages and tool calls where it recorded them",
    )
    .argument("<run>", "run name (see `evalfleet status`)")
    .requiredOption("--out <dir>", "folder to write <cell>.attempt-<n>.json files into (created if missing)")
    .option("--cell <id>", "only this cell's attempts")
    .option(
      "--state-dir <dir>",
      "where embedded state (PGlite, the NATS store) lives when DATABASE_URL / NATS_URL are unset (default .evalfleet)",
    )
    .action(async (run: string, flags: TrajectoriesFlags) => {
      const settings = loadSettings("report", { flags: { stateDir: flags.stateDir } });
      const opened = await openCliDb(settings, "trajectories");
      try {
        await assertRunExists(opened.db, run, opened.label);
        const [cells, calls, meta] = await Promise.all([
          loadTrajectoryCells(opened.db, run, flags.cell),
          loadTrajectoryCalls(opened.db, run, flags.cell),
          getRunMetadata(opened.db, run),
        ]);
        if (flags.cell && cells.length === 0) {
          process.stderr.write(
            `error: run ${run} has no attempt row for cell "${flags.cell}"; list its cells with: evalfleet report ${run} --format json\n`,
          );
          process.exitCode = 2;
          return;
        }
        const dir = resolve(flags.out);
        await mkdir(dir, { recursive: true });
        const blobs = await openBlobReader(settings, "trajectories");
        let written = 0;
        let noBlob = 0;
        try {
          for await (const t of attemptTrajectories({
            run,
            cells,
            calls,
            config: parseConfig(meta?.configJson),
            blob: blobs.get,
          })) {
            await writeFile(join(dir, t.file), `${JSON.stringify(t.trajectory, null, 2)}\n`);
            written++;
            if (!t.hadBlob) noBlob++;
          }
        } finally {
          await blobs.close();
        }
        process.stdout.write(
          `trajectories: ${written} ATIF file(s) written to ${dir}` +
            (noBlob > 0
              ? ` (${noBlob} without the harness's own trajectory: its blob was not readable, so those have the ledger's steps only)`
              : "") +
            "\n",
        );
      } finally {
        await opened.close();
      }
    });
}
