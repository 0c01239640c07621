import type { RunConfig } from "../protocol/config.js";
import type { Db } from "../store/db.js";
import {
  loadAttempts,
  loadLedgerGroups,
  loadPhaseGroups,
  loadSandboxes,
  loadSpendBuckets,
} from "../store/report.js";
import { getRunMetadata } from "../store/results.js";
import { listSecurityEvents } from "../store/security.js";
import type { ReportInput, RunOptions } from "./types.js";

/** Everything buildReport needs, read in parallel. */
export async function loadReportInput(db: Db, run: string): Promise<Omit<ReportInput, "k">> {
  const [attempts, ledger, phases, spend, security, sandboxes, metadata] = await Promise.all([
    loadAttempts(db, run),
    loadLedgerGroups(db, run),
    loadPhaseGroups(db, run),
    loadSpendBuckets(db, run),
    listSecurityEvents(db, run, 10_000),
    loadSandboxes(db, run),
    getRunMetadata(db, run),
  ]);
  return { run, attempts, ledger, phases, spend, security, sandboxes, runOptions: runOptionsOf(metadata) };
}

/** The run options its stored config states (absent ones are the defaults). */
export function runOptionsOf(metadata: { configJson: string } | null): RunOptions {
  let config: Partial<Pick<RunConfig, "infra_failures" | "unvalidated">> = {};
  try {
    config = metadata ? (JSON.parse(metadata.configJson) as typeof config) : {};
  } catch {
    // an unreadable stored config states nothing: the defaults hold
  }
  return { infraFailures: config.infra_failures ?? "apart", unvalidated: config.unvalidated === true };
}
