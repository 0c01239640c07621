import { connect } from "@nats-io/transport-node";
import type { Command } from "commander";
import { requestControl } from "../../actors/dispatcher/control.js";
import { natsUrl } from "../../actors/runtime/connect.js";
import { ErrorCode, RetryableError } from "../../protocol/errors.js";
import type { ControlVerb } from "../../protocol/subjects.js";
import { printJson } from "./output.js";

const VERBS: Array<{ verb: ControlVerb; what: string }> = [
  {
    verb: "drain",
    what: "Stop launching new attempts of a run; running attempts finish (resume continues it)",
  },
  { verb: "cancel", what: "Stop a run now: running attempts are stopped and their cells end failed" },
  {
    verb: "resume",
    what: "Allow launches again and re-submit the run's stored config: only its incomplete cells run",
  },
];

/** `evalfleet drain|cancel|resume RUN`: request/reply to the dispatchers, which keep the state in KV. */
export function register(program: Command): void {
  for (const { verb, what } of VERBS) {
    program
      .command(verb)
      .description(what)
      .argument("<run>", "run name")
      .option("--json", "print the dispatcher's reply as one JSON line")
      .option("--timeout <ms>", "how long to wait for a dispatcher", "5000")
      .action(async (run: string, opts: { json?: boolean; timeout: string }) => {
        // A bare connection: the request needs no buckets, and works against a plane that is still starting.
        const servers = natsUrl().split(",");
        const nc = await connect({ servers, name: `evalfleet-${verb}`, timeout: 5_000 }).catch(
          (err: unknown) => {
            throw new RetryableError(
              ErrorCode.Unavailable,
              `cannot reach NATS at ${servers.join(",")}: ${err instanceof Error ? err.message : String(err)}. Set NATS_URL.`,
            );
          },
        );
        try {
          const reply = await requestControl(nc, run, verb, {
            timeoutMs: Number(opts.timeout) || 5_000,
            requestedBy: `cli@${process.env.USER ?? "unknown"}`,
          });
          if (opts.json) printJson(reply);
          else process.stdout.write(`${reply.message} (was ${reply.previous}, answered by ${reply.by})\n`);
          if (!reply.ok) process.exitCode = 1;
        } finally {
          await nc.close();
        }
      });
  }
}
