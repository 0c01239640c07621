import { resolve } from "node:path";
import type { Command } from "commander";
import { createLogger } from "../../protocol/log.js";
import { MessageTypes, type RunProgress } from "../../protocol/messages.js";
import { ProgressKeys } from "../../protocol/subjects.js";
import { nanoToUsd } from "../../store/money.js";
import { ledgerTotals } from "../../store/results.js";
import { type LocalPlane, startLocalPlane } from "../local/up.js";
import { buildReport } from "../report/aggregate.js";
import { formatTable } from "../report/format.js";
import { loadReportInput } from "../report/load.js";
import { dryRunTable, planFile } from "./plan.js";
import { readRunFile, submitRun } from "./submit.js";

/** The sample run `npm start` shows a new user. */
export const SAMPLE_RUN = resolve(import.meta.dirname, "../../examples/sample-run.yaml");

/** A run name unique to this start, so the sample runs in full every time (resubmitting a name resumes it). */
function uniqueName(base: string): string {
  const stamp = new Date().toISOString().replace(/[-:]/g, "").replace(/\..*$/, "").replace("T", "-");
  return `${base}-${stamp}`;
}

function progressLine(p: RunProgress): string {
  const done = p.completed + p.failed + p.skipped;
  const width = 30;
  const filled = p.totalCells ? Math.round((done / p.totalCells) * width) : 0;
  const bar = `${"#".repeat(filled)}${"-".repeat(width - filled)}`;
  const cap = p.budgetNanoUsd === null ? "" : ` of $${nanoToUsd(p.budgetNanoUsd).slice(0, -5)} cap`;
  return `[${bar}] ${done}/${p.totalCells} cells  completed ${p.completed}  failed ${p.failed}  skipped ${p.skipped}  running ${p.running}  spend $${nanoToUsd(p.billableCostNanoUsd).slice(0, -5)}${cap}`;
}

/** Follow the run's progress key (KV only) until it finishes, printing a line whenever it changes. */
async function follow(plane: LocalPlane, run: string, timeoutMs: number): Promise<RunProgress | undefined> {
  const kv = plane.running.ctx.plane.kv.progress;
  const deadline = Date.now() + timeoutMs;
  let last = "";
  let latest: RunProgress | undefined;
  while (Date.now() < deadline) {
    const e = await kv.get(ProgressKeys.run(run));
    if (e && e.length > 0) {
      const p = e.json<RunProgress>();
      if (p.type === MessageTypes.runProgress) {
        latest = p;
        const line = progressLine(p);
        if (line !== last) process.stdout.write(`${line}\n`);
        last = line;
        if (p.phase === "finished" || p.phase === "cancelled") return p;
      }
    }
    await new Promise((r) => setTimeout(r, 1_000));
  }
  return latest;
}

export function register(program: Command): void {
  program
    .command("start")
    .description("The main job on embedded defaults: plane up, the sample run planned, run, graded, reported")
    .option("--run <file>", "run file to submit instead of the sample", SAMPLE_RUN)
    .option("--name <name>", "run name (default: the file's name plus a timestamp; an existing name resumes)")
    .option("--state-dir <dir>", "where embedded state (PGlite, workdirs, git mirrors) lives", ".evalfleet")
    .option("--timeout-s <s>", "give up following the run after this long", "900")
    .action(async (opts: { run: string; name?: string; stateDir: string; timeoutS: string }) => {
      const log = createLogger({ name: "evalfleet", level: process.env.EVALFLEET_LOG_LEVEL ?? "warn" });
      const plan = await planFile(opts.run);
      process.stdout.write(
        `Dry run of ${opts.run} (${plan.tasks.length} tasks):\n\n${dryRunTable(plan)}\n\n`,
      );
      const config = await readRunFile(opts.run);
      const run = opts.name ?? uniqueName(config.name);
      // Without NATS_URL the main job brings its own nats-server, so it never meets another run's leftovers.
      const plane = await startLocalPlane({
        log,
        stateDir: opts.stateDir,
        ownNats: process.env.NATS_URL === undefined,
      });
      try {
        process.stdout.write(
          `plane up: NATS ${plane.natsUrl}${plane.ownNats ? " (own nats-server)" : ""}, ${plane.dbLabel}, ` +
            `models via the gateway at ${plane.gateway.url} to ${plane.upstreams.describe}\n` +
            `actors: ${plane.running.actors.map((a) => a.name).join(", ")}\n\n`,
        );
        const ev = await submitRun({ ...config, name: run }, { timeoutMs: 60_000, servers: plane.natsUrl });
        process.stdout.write(`planner: ${ev.kind}: ${ev.message}\n`);
        if (ev.kind === "rejected") {
          process.exitCode = 2;
          return;
        }
        process.stdout.write(
          `watch it from another terminal: NATS_URL=${plane.natsUrl} npx evalfleet watch ${run}\n\n`,
        );
        const final = await follow(plane, run, Number(opts.timeoutS) * 1000);
        if (final?.phase !== "finished") {
          process.stdout.write(
            `run ${run} did not finish within ${opts.timeoutS} s (phase ${final?.phase ?? "unknown"})\n`,
          );
          process.exitCode = 1;
        }
        const report = buildReport(await loadReportInput(plane.db, run));
        process.stdout.write(`\n${formatTable(report)}\n`);
        const ledger = await ledgerTotals(plane.db, run);
        const bill = plane.upstreams.scripted?.bill();
        process.stdout.write(
          `\nledger: ${ledger.calls} calls, $${nanoToUsd(ledger.allNanoUsd)} spent ($${nanoToUsd(ledger.nonVoidedNanoUsd)} on final attempts)\n`,
        );
        if (bill) {
          const same = bill.total.costNanoUsd === ledger.allNanoUsd;
          process.stdout.write(
            `scripted provider's bill: ${bill.total.calls} calls, $${nanoToUsd(bill.total.costNanoUsd)} — ${same ? "equal to the ledger" : "DIFFERS from the ledger"}\n`,
          );
          if (!same) process.exitCode = 1;
        }
        const rec = await plane.db.query<{ n: number; flagged: number }>(
          "SELECT count(*)::int AS n, count(*) FILTER (WHERE flagged)::int AS flagged FROM reconciliation_results WHERE run_name = $1",
          [run],
        );
        const r = rec.rows[0];
        process.stdout.write(
          `reconciliation, ledger vs the gateway's own spend log: ${r?.n ?? 0} attempts, ${r?.flagged ?? 0} flagged\n`,
        );
        process.stdout.write(`\nresults are in ${plane.dbLabel}; see \`npx evalfleet report ${run}\`\n`);
      } finally {
        await plane.stop();
      }
    });
}
