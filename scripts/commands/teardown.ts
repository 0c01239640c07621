import type { Command } from "commander";
import { type TeardownReport, teardown } from "../../actors/dispatcher/backends/ecs-teardown.js";
import { openResultsDb } from "../../actors/runtime/main.js";
import { revokeRunKeys } from "../../gateway-sidecar/keys.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { createLogger } from "../../protocol/log.js";

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
  lines.push(`  harness tasks found: ${r.found}, stopped: ${r.stopped.length}, failed: ${r.failed.length}`);
  for (const f of r.failed) lines.push(`    could not stop ${f.handle}: ${f.error}`);
  for (const run of r.keysRevoked) lines.push(`  revoked keys of run ${run}`);
  for (const k of r.keysNotRevoked) lines.push(`  keys of run ${k.run} NOT revoked: ${k.reason}`);
  if (r.scaled.length === 0) lines.push("  eval capacity: left as is");
  for (const s of r.scaled) lines.push(`  eval capacity ${s.asg}: ${s.from} -> ${s.to} hosts`);
  return lines.join("\n");
}

export function register(program: Command): void {
  program
    .command("teardown")
    .description("Stop every harness task of a run (or all), revoke its keys, scale the eval tier to zero")
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
      const cluster = flags.cluster ?? process.env.EVALFLEET_ECS_CLUSTER;
      if (!cluster) {
        throw new EvalfleetError(
          ErrorCode.InvalidConfig,
          "no ECS cluster: pass --cluster or set EVALFLEET_ECS_CLUSTER",
        );
      }
      const asgNames = flags.keepEval
        ? []
        : (flags.asg ?? process.env.EVALFLEET_EVAL_ASG?.split(",").filter(Boolean) ?? []);
      // Loaded on demand so the rest of the CLI starts without the AWS SDK.
      const { ECSClient } = await import("@aws-sdk/client-ecs");
      const { AutoScalingClient } = await import("@aws-sdk/client-auto-scaling");
      const region = flags.region === undefined ? {} : { region: flags.region };
      // A run's gateway keys live in PostgreSQL: revoked there (and its tasks' copy in KV dropped) when we can reach it.
      const databaseUrl = process.env.DATABASE_URL;
      const revoke = databaseUrl
        ? async (run: string) => {
            const log = createLogger({ name: "evalfleet", level: "warn" });
            const db = await openResultsDb({ url: databaseUrl, log });
            try {
              await revokeRunKeys(db, run);
            } finally {
              await db.close();
            }
          }
        : undefined;
      const report = await teardown({
        ...(revoke ? { revokeRunKeys: revoke } : {}),
        ecs: new ECSClient(region),
        cluster,
        ...(flags.run === undefined ? {} : { run: flags.run }),
        autoScaling: new AutoScalingClient(region),
        asgNames,
        dryRun: flags.dryRun ?? false,
      });
      process.stdout.write(
        flags.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatTeardown(report)}\n`,
      );
      if (report.failed.length > 0) process.exitCode = 1;
    });
}
