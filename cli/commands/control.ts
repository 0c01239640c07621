import type { Command } from "commander";
import { requestControl } from "../../actors/dispatcher/control.js";
import { loadSettings } from "../../config/index.js";
import { planeNats } from "../../local/plane-nats.js";
import { connectNats } from "../../plane/connect.js";
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
        const settings = loadSettings("operator");
        const nc = await connectNats(await planeNats(settings), {
          name: `evalfleet-${verb}`,
          reconnect: false,
        });
        try {
          const reply = await requestControl(nc, run, verb, {
            timeoutMs: Number(opts.timeout) || 5_000,
            requestedBy: `cli@${settings.host.user}`,
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
