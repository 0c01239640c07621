import { readFile } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import type { Command } from "commander";
import { stringify } from "yaml";
import { plannerTimeout } from "../../actors/planner/actor.js";
import { parseSubmission } from "../../actors/planner/plan.js";
import { openPlane } from "../../actors/runtime/connect.js";
import type { RunConfig } from "../../protocol/config.js";
import { ErrorCode, EvalfleetError, formatIssues } from "../../protocol/errors.js";
import { type RunEvent, RunEventSchema } from "../../protocol/messages.js";
import { Subjects } from "../../protocol/subjects.js";
import { checkGateway, defaultGatewayUrl } from "./gateway-check.js";

/** Read, check locally, and make the task library path absolute so the planner finds it wherever it runs. */
export async function readRunFile(file: string): Promise<RunConfig> {
  let data: Buffer;
  try {
    data = await readFile(file);
  } catch (err) {
    throw new EvalfleetError(
      ErrorCode.InvalidConfig,
      `cannot read run file ${file}: ${(err as NodeJS.ErrnoException).code ?? String(err)} — check the path`,
    );
  }
  const config = parseSubmission(data);
  return { ...config, task_library_path: resolve(dirname(resolve(file)), config.task_library_path) };
}

/**
 * Submit a run and wait for the planner's verdict (accepted, resumed or rejected), listening on the run's events
 * subject before publishing so the answer cannot be missed.
 */
export async function submitRun(
  config: RunConfig,
  opts: { timeoutMs: number; servers?: string },
): Promise<RunEvent> {
  const plane = await openPlane({
    name: "evalfleet-submit",
    ...(opts.servers ? { servers: opts.servers } : {}),
  });
  try {
    const sub = plane.nc.subscribe(Subjects.events.run(config.name));
    const verdict = (async () => {
      for await (const m of sub) {
        const r = RunEventSchema.safeParse(m.json());
        if (r.success && ["accepted", "resumed", "rejected"].includes(r.data.kind)) return r.data;
      }
      return undefined;
    })();
    await plane.js.publish(Subjects.runSubmit, stringify(config));
    const timer = setTimeout(() => sub.unsubscribe(), opts.timeoutMs);
    const ev = await verdict;
    clearTimeout(timer);
    if (!ev) throw plannerTimeout(config.name, opts.timeoutMs);
    return ev;
  } finally {
    await plane.close();
  }
}

export function register(program: Command): void {
  program
    .command("submit")
    .description("Submit a run to the planner (NATS_URL) and print its verdict")
    .argument("<run-file>", "run config (YAML or JSON)")
    .option("--timeout-ms <ms>", "how long to wait for the planner", "30000")
    .option("--json", "print the verdict event as JSON")
    .option(
      "--no-check-gateway",
      "skip the gateway preflight (EVALFLEET_GATEWAY_URL, default http://127.0.0.1:8787)",
    )
    .action(async (file: string, opts: { timeoutMs: string; json?: boolean; checkGateway: boolean }) => {
      const config = await readRunFile(file);
      if (opts.checkGateway) {
        const gw = await checkGateway(defaultGatewayUrl());
        if (!gw.ok) {
          process.stderr.write(`${gw.message}\n`);
          process.exitCode = 1;
          return;
        }
      }
      const ev = await submitRun(config, { timeoutMs: Number(opts.timeoutMs) });
      if (opts.json) process.stdout.write(`${JSON.stringify(ev)}\n`);
      else {
        process.stdout.write(`${ev.kind}: ${ev.message}\n`);
        if (ev.issues?.length) process.stdout.write(`${formatIssues(ev.issues)}\n`);
      }
      if (ev.kind === "rejected") process.exitCode = 2;
    });
}
