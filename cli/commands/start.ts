import { resolve } from "node:path";
import type { Command } from "commander";
import { formatUsd4 } from "../../actors/dispatcher/budget.js";
import { loadSettings } from "../../config/index.js";
import { createLogger } from "../../lib/log.js";
import { gradedBy } from "../../local/grading.js";
import { type LocalPlane, startLocalPlane } from "../../local/up.js";
import { TypedKv } from "../../plane/kv.js";
import type { RunConfig } from "../../protocol/config.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { type RunProgress, RunProgressSchema } from "../../protocol/messages.js";
import { nanoToUsd, usdToNano } from "../../protocol/money.js";
import { ProgressKeys } from "../../protocol/subjects.js";
import { buildReport } from "../../report/aggregate.js";
import { formatTable } from "../../report/format.js";
import { loadReportInput } from "../../report/load.js";
import { reconciliationSummary } from "../../store/reconcile.js";
import { ledgerTotals } from "../../store/results.js";
import { getRunSpend } from "../../store/writer.js";
import { dryRunTable, planFile } from "./plan.js";
import { readRunFile, submitRun } from "./submit.js";

/** The sample run `npm start` shows a new user. */
export const SAMPLE_RUN = resolve(import.meta.dirname, "../../examples/sample-run.yaml");

/** A run name unique to this start, so the sample runs in full every time (resubmitting a name resumes it). */
function uniqueName(base: string): string {
  const stamp = new Date().toISOString().replace(/[-:]/g, "").replace(/\..*$/, "").replace("T", "-");
  return `${base}-${stamp}`;
}

/**
 * What the run may spend, said before anything runs: with real providers, its budget cap (or, without one, what
 * its per-attempt cap allows over every cell); with the scripted provider, that nothing is billed, and whether
 * provider keys in the environment are being left unused.
 */
export function spendNotice(
  config: Pick<RunConfig, "budget_usd" | "max_cost_usd">,
  cells: number,
  real: boolean,
  keys: readonly string[],
): string {
  if (!real)
    return keys.length > 0
      ? `Model calls go to the scripted provider: nothing is billed. (${keys.join(" and ")} keys are set but unused; pass --real-providers to call real providers.)`
      : "Model calls go to the scripted provider: nothing is billed.";
  const nano = (usd: number) => Number(usdToNano(usd));
  const limit =
    config.budget_usd !== undefined
      ? `at most ${formatUsd4(nano(config.budget_usd))} (budget_usd, enforced by the gateway)`
      : config.max_cost_usd !== undefined
        ? `at most ${formatUsd4(nano(config.max_cost_usd) * cells)} (no budget_usd: max_cost_usd ${formatUsd4(nano(config.max_cost_usd))} × ${cells} cells, before retries)`
        : "WITHOUT A LIMIT (no budget_usd and no max_cost_usd in the run file)";
  return `Model calls go to the real providers (${keys.join(", ")}): this run may spend ${limit}.`;
}

/**
 * The seed's summary: the informational total (budget-exempt cells included), the billable figure against the cap
 * when the run has one, and the first five error messages of failed and skipped cells.
 */
export function seedSummary(
  spend: {
    totalNanoUsd: number;
    billableNanoUsd: number;
    estimatedNanoUsd?: number;
    estimatedCalls?: number;
  },
  progress: Pick<RunProgress, "budgetNanoUsd" | "errors" | "seed"> | undefined,
): string {
  const lines = [
    `Total cost (informational, includes budget-exempt cells): ${formatUsd4(spend.totalNanoUsd)}`,
  ];
  const cap = progress?.budgetNanoUsd ?? null;
  if (cap !== null)
    lines.push(`Billable cost: ${formatUsd4(spend.billableNanoUsd)} / ${formatUsd4(cap)} budget cap`);
  if (spend.estimatedCalls)
    lines.push(
      `  of which estimated: ${formatUsd4(spend.estimatedNanoUsd ?? 0)} for ${spend.estimatedCalls} call(s) whose answer reached nobody (at their worst case until trued up to the provider's usage report: ANTHROPIC_ADMIN_KEY / OPENAI_ADMIN_KEY)`,
    );
  const seed = progress?.seed;
  // The seed's meanings: completed = passed, failed = failed or killed, skipped = budget cap or done before.
  if (seed) lines.push(`Completed: ${seed.completed}  Failed: ${seed.failed}  Skipped: ${seed.skipped}`);
  const errors = progress?.errors ?? [];
  if (errors.length > 0) {
    lines.push(errors.length > 5 ? "Errors (first 5 shown):" : "Errors:");
    for (const e of errors.slice(0, 5)) lines.push(`  - ${e}`);
  }
  return lines.join("\n");
}

/** Where the run's patches were graded, from its grade results. */
export function gradedLine(by: Record<string, number>): string {
  const parts = Object.entries(by)
    .sort(([a], [b]) => (a < b ? -1 : 1))
    .map(([k, n]) =>
      k === "docker"
        ? `${n} in containers (docker, images pinned by digest)`
        : k === "local"
          ? `${n} in checkouts on this host (local grader)`
          : `${n} ${k}`,
    );
  return parts.length === 0 ? "graded: nothing was graded" : `graded: ${parts.join(", ")}`;
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
  const progress = new TypedKv(plane.running.ctx.plane.kv.progress, RunProgressSchema, "run progress");
  const deadline = Date.now() + timeoutMs;
  let last = "";
  let latest: RunProgress | undefined;
  while (Date.now() < deadline) {
    const p = (await progress.get(ProgressKeys.run(run)))?.value;
    if (p) {
      latest = p;
      const line = progressLine(p);
      if (line !== last) process.stdout.write(`${line}\n`);
      last = line;
      if (p.phase === "finished" || p.phase === "cancelled") return p;
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
    .option(
      "--state-dir <dir>",
      "where embedded state (PGlite, workdirs, git mirrors) lives (default .evalfleet)",
    )
    .option("--timeout-s <s>", "give up following the run after this long", "900")
    .option(
      "--real-providers",
      "call the real providers (ANTHROPIC_API_KEY / OPENAI_API_KEY) instead of the scripted one; prints what the run may spend first",
    )
    .option("--unvalidated", "run even if some tasks fail gold validation (every report says so)")
    .action(
      async (opts: {
        run: string;
        name?: string;
        stateDir?: string;
        timeoutS: string;
        realProviders?: boolean;
        unvalidated?: boolean;
      }) => {
        const { realProviders, unvalidated, ...flags } = opts;
        const settings = loadSettings("start", { flags });
        const log = createLogger({ name: "evalfleet", level: settings.log.level });
        const plan = await planFile(opts.run);
        process.stdout.write(
          `Dry run of ${opts.run} (${plan.tasks.length} tasks):\n\n${dryRunTable(plan)}\n\n`,
        );
        const config = await readRunFile(opts.run);
        if (unvalidated) config.unvalidated = true;
        const run = opts.name ?? uniqueName(config.name);
        const real = realProviders === true;
        if (real && config.budget_usd === undefined && config.max_cost_usd === undefined)
          throw new EvalfleetError(
            ErrorCode.InvalidConfig,
            `--real-providers with ${opts.run}, which sets neither budget_usd nor max_cost_usd: the run could spend without a limit; add budget_usd (and max_cost_usd per attempt) to the run file`,
          );
        process.stdout.write(
          `${spendNotice(config, plan.cells.length, real, Object.keys(settings.providers))}\n\n`,
        );
        // Without NATS_URL the main job brings its own nats-server, so it never meets another run's leftovers.
        const plane = await startLocalPlane({
          log,
          settings,
          ownNats: !settings.nats.configured,
          command: "start",
          realProviders: real,
          gradeLibrary: plan.libraryDir,
        });
        try {
          process.stdout.write(
            `plane up: NATS ${plane.natsUrl}${plane.ownNats ? " (own nats-server)" : ""}, ${plane.dbLabel}, ` +
              `models via the gateway at ${plane.gateway.url} to ${plane.upstreams.describe}\n` +
              `actors: ${plane.running.actors.map((a) => a.name).join(", ")}\n${plane.sandbox}\n` +
              `${plane.grading.line}\n\n`,
          );
          const ev = await submitRun({ ...config, name: run }, { timeoutMs: 60_000, nats: plane.nats });
          process.stdout.write(`planner: ${ev.kind}: ${ev.message}\n`);
          if (ev.kind === "rejected") {
            process.exitCode = 2;
            return;
          }
          // Its own nats-server admits no anonymous client: watch with the plane's credential.
          const creds = plane.nats.auth.kind === "creds" ? ` NATS_CREDS=${plane.nats.auth.file}` : "";
          process.stdout.write(
            `watch it from another terminal: NATS_URL=${plane.natsUrl}${creds} npx evalfleet watch ${run}\n\n`,
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
          process.stdout.write(`\n${gradedLine(await gradedBy(plane.running.ctx.plane, run))}\n`);
          process.stdout.write(`\n${seedSummary(await getRunSpend(plane.db, run), final)}\n`);
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
          const r = await reconciliationSummary(plane.db, run);
          process.stdout.write(
            `reconciliation, ledger vs the gateway's own spend log: ${r.cells} attempts, ${r.flagged} flagged\n`,
          );
          process.stdout.write(`\nresults are in ${plane.dbLabel}; see \`npx evalfleet report ${run}\`\n`);
        } finally {
          await plane.stop();
        }
      },
    );
}
