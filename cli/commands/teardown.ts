import type { Command } from "commander";
import { type TeardownReport, teardown } from "../../actors/dispatcher/backends/ecs-teardown.js";
import { requestControl } from "../../actors/dispatcher/control.js";
import { openDatabase } from "../../actors/runtime/main.js";
import { loadSettings } from "../../config/index.js";
import { createLogger } from "../../lib/log.js";
import { openPlane, type Plane } from "../../plane/connect.js";
import { purgeAttemptKeys } from "../../plane/prune.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { StateKeys } from "../../protocol/subjects.js";
import { revokeRunKeys } from "../../store/keys.js";

interface TeardownFlags {
  run?: string;
  cluster?: string;
  asg?: string[];
  region?: string;
  keepEval?: boolean;
  dryRun?: boolean;
  json?: boolean;
}

/** Human-readable lines for a teardown report: everything it did, and everything it could not do. */
export function formatTeardown(r: TeardownReport): string {
  const lines: string[] = [];
  const scope = r.run === null ? "all runs" : `run ${r.run}`;
  lines.push(`${r.dryRun ? "[dry run] " : ""}teardown of ${scope} on cluster ${r.cluster}`);
  for (const c of r.cancelled) lines.push(`  cancelled run ${c.run} in NATS: ${c.how}`);
  for (const c of r.notCancelled) lines.push(`  run ${c.run} NOT cancelled in NATS: ${c.reason}`);
  lines.push(`  harness tasks found: ${r.found}, stopped: ${r.stopped.length}, failed: ${r.failed.length}`);
  for (const f of r.failed) lines.push(`    could not stop ${f.handle}: ${f.error}`);
  for (const k of r.keysRevoked) lines.push(`  revoked keys of run ${k.run}: ${k.what}`);
  for (const k of r.keysNotRevoked) lines.push(`  keys of run ${k.run} NOT revoked: ${k.reason}`);
  if (r.scaled.length === 0) lines.push("  eval capacity: left as is");
  for (const s of r.scaled) lines.push(`  eval capacity ${s.asg}: ${s.from} -> ${s.to} hosts`);
  return lines.join("\n");
}

export function register(program: Command): void {
  program
    .command("teardown")
    .description(
      "Cancel a run (or every run with tasks) in NATS, stop its harness tasks, revoke its keys (PostgreSQL and the KV copy), scale the eval tier to zero; prints each step",
    )
    .option("--run <run>", "only this run's tasks (default: every evalfleet harness task)")
    .option("--cluster <cluster>", "ECS cluster (default: $EVALFLEET_ECS_CLUSTER)")
    .option(
      "--asg <name...>",
      "eval-tier Auto Scaling group(s) to scale to zero (default: $EVALFLEET_EVAL_ASG)",
    )
    .option("--region <region>", "AWS region (default: the SDK's)")
    .option("--keep-eval", "leave eval capacity as it is")
    .option("--dry-run", "list what would be stopped, change nothing")
    .option("--json", "print the report as JSON")
    .action(async (flags: TeardownFlags) => {
      const settings = loadSettings("teardown", { flags });
      const cluster = settings.teardown.cluster;
      if (!cluster) {
        throw new EvalfleetError(
          ErrorCode.InvalidConfig,
          "no ECS cluster: pass --cluster or set EVALFLEET_ECS_CLUSTER",
        );
      }
      const asgNames = flags.keepEval ? [] : settings.teardown.asgs;
      // Loaded on demand so the rest of the CLI starts without the AWS SDK.
      const { ECSClient } = await import("@aws-sdk/client-ecs");
      const { AutoScalingClient } = await import("@aws-sdk/client-auto-scaling");
      const { AsgCapacity } = await import("../../actors/grader-supervisor/scaler.js");
      const region = settings.teardown.region === undefined ? {} : { region: settings.teardown.region };
      const log = createLogger({ name: "evalfleet", level: settings.log.level });
      // The plane first: the run is cancelled there before anything is stopped, and tasks read their key from it.
      const plane: Plane | undefined = await openPlane({
        name: "evalfleet-teardown",
        nats: settings.nats,
        ensure: false,
      }).catch((err: unknown) => {
        process.stderr.write(
          `teardown: NATS unreachable (${err instanceof Error ? err.message : String(err)}): runs cannot be cancelled there; set NATS_URL (and its credentials)\n`,
        );
        return undefined;
      });
      const cancelRun = plane
        ? async (run: string): Promise<string> => {
            try {
              const reply = await requestControl(plane.nc, run, "cancel", { requestedBy: "teardown" });
              return `${reply.message} (answered by ${reply.by})`;
            } catch (err) {
              if (!(err instanceof EvalfleetError) || err.code !== ErrorCode.Unavailable) throw err;
              // No dispatcher is up: the state goes where every dispatcher reads it when it starts.
              await plane.kv.control.put(
                StateKeys.control(run),
                JSON.stringify({
                  run,
                  state: "cancelled",
                  verb: "cancel",
                  requestedBy: "teardown",
                  at: new Date().toISOString(),
                }),
              );
              return "no dispatcher answered; cancelled in the control bucket, which every dispatcher obeys when it starts";
            }
          }
        : undefined;
      // A run's gateway keys live in PostgreSQL; its tasks read a copy from KV (jobs key.<run>). Both go.
      const database = settings.database;
      const revoke =
        database.kind !== "none" || plane
          ? async (run: string): Promise<string> => {
              const done: string[] = [];
              const missing: string[] = [];
              if (database.kind !== "none") {
                const { db, close } = await openDatabase(database, { command: "teardown", log });
                try {
                  done.push(`${await revokeRunKeys(db, run)} key(s) revoked in PostgreSQL`);
                } finally {
                  await close();
                }
              } else missing.push("PostgreSQL (set DATABASE_URL or PGHOST)");
              if (plane) {
                const n = await purgeAttemptKeys(plane.jsm, run);
                done.push(`${n} KV cop${n === 1 ? "y" : "ies"} deleted`);
              } else missing.push("the KV copy (NATS unreachable)");
              if (missing.length > 0)
                throw new EvalfleetError(
                  ErrorCode.Unavailable,
                  `${done.join(", ") || "nothing revoked"}; NOT revoked in ${missing.join(", ")}`,
                );
              return done.join(", ");
            }
          : undefined;
      let report: TeardownReport;
      try {
        report = await teardown({
          ...(cancelRun ? { cancelRun } : {}),
          ...(revoke ? { revokeRunKeys: revoke } : {}),
          ecs: new ECSClient(region),
          cluster,
          ...(flags.run === undefined ? {} : { run: flags.run }),
          evalGroups: asgNames.map((name) => new AsgCapacity(new AutoScalingClient(region), name)),
          dryRun: flags.dryRun ?? false,
        });
      } finally {
        await plane?.close();
      }
      process.stdout.write(
        flags.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatTeardown(report)}\n`,
      );
      if (report.failed.length > 0 || report.notCancelled.length > 0 || report.keysNotRevoked.length > 0)
        process.exitCode = 1;
    });
}
