import { readFile } from "node:fs/promises";
import { dirname, resolve } from "node:path";
import type { Command } from "commander";
import { stringify } from "yaml";
import { plannerTimeout } from "../../actors/planner/actor.js";
import { parseSubmission } from "../../actors/planner/plan.js";
import { loadSettings, type NatsSettings } from "../../config/index.js";
import { planeNats } from "../../local/plane-nats.js";
import { openPlane } from "../../plane/connect.js";
import type { RunConfig } from "../../protocol/config.js";
import { ErrorCode, EvalfleetError, formatIssues } from "../../protocol/errors.js";
import { type RunEvent, RunEventSchema } from "../../protocol/messages.js";
import { nameProblem } from "../../protocol/names.js";
import { Subjects } from "../../protocol/subjects.js";
import { checkGateway } from "./gateway-check.js";

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

/** The run under another name (`--name`): a new name is a new run, an existing one resumes it. */
export function renameRun(config: RunConfig, name: string): RunConfig {
  const problem = nameProblem(name);
  if (problem)
    throw new EvalfleetError(
      ErrorCode.InvalidConfig,
      `--name "${name}" is not a valid run name: ${problem}. Use letters, digits and _ . : @ + -`,
    );
  return { ...config, name };
}

/**
 * Submit a run and wait for the planner's verdict (accepted, resumed or rejected), listening on the run's events
 * subject before publishing so the answer cannot be missed.
 */
export async function submitRun(
  config: RunConfig,
  opts: { timeoutMs: number; nats: NatsSettings },
): Promise<RunEvent> {
  const plane = await openPlane({ name: "evalfleet-submit", nats: opts.nats });
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
      "--name <name>",
      "submit under this run name instead of the file's (a new name is a new run; an existing name resumes it)",
    )
    .option(
      "--no-check-gateway",
      "skip the gateway preflight (EVALFLEET_GATEWAY_URL, default http://127.0.0.1:8787)",
    )
    .option(
      "--unvalidated",
      "run even though some tasks are not gold-validated (or invalid); stored with the run, and every report says so",
    )
    .action(
      async (
        file: string,
        opts: {
          timeoutMs: string;
          json?: boolean;
          checkGateway: boolean;
          name?: string;
          unvalidated?: boolean;
        },
      ) => {
        const settings = loadSettings("submit");
        const read = await readRunFile(file);
        const config = opts.name === undefined ? read : renameRun(read, opts.name);
        if (opts.unvalidated) config.unvalidated = true;
        if (opts.checkGateway) {
          const gw = await checkGateway(settings.gatewayUrl.url);
          if (!gw.ok) {
            process.stderr.write(`${gw.message}\n`);
            process.exitCode = 1;
            return;
          }
        }
        const ev = await submitRun(config, {
          timeoutMs: Number(opts.timeoutMs),
          nats: await planeNats(settings),
        });
        if (opts.json) process.stdout.write(`${JSON.stringify(ev)}\n`);
        else {
          process.stdout.write(`${ev.kind}: ${ev.message}\n`);
          if (ev.issues?.length) process.stdout.write(`${formatIssues(ev.issues)}\n`);
        }
        if (ev.kind === "rejected") process.exitCode = 2;
      },
    );
}
