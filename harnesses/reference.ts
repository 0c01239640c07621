import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { FROM_SOURCE, ownModule } from "../lib/self.js";
import { proxyEnv } from "./command.js";
import { envSetting } from "./common.js";
import { MAX_TURNS_LINE } from "./reference-agent.js";
import type { HarnessAdapter } from "./types.js";

const AGENT = ownModule("harnesses", "reference-agent");

/** tsx's loader as a file URL, so the child resolves it no matter what its working directory holds. */
function tsxLoader(): string {
  const require = createRequire(import.meta.url);
  return pathToFileURL(require.resolve("tsx")).href;
}

/**
 * The built-in reference agent (reference-agent.ts) as a child process: Node (with tsx when evalfleet runs from its
 * sources; the compiled file as it is from `dist/`), pointed at the shim through
 * the same environment a command harness gets. Its turn cap is EVALFLEET_MAX_TURNS; the shim enforces it too.
 */
export const reference: HarnessAdapter = {
  kind: "reference",
  costMode: "shim",
  ownTurnCap: true,
  async prepare(ctx) {
    // In a container the agent is the harness layer's own copy, run by the layer's Node: no host path exists there.
    const [command, ...args] = ctx.runtime
      ? ctx.runtime.referenceAgent
      : [process.execPath, ...(FROM_SOURCE ? ["--import", tsxLoader(), AGENT] : [AGENT])];
    return {
      command: command ?? process.execPath,
      args,
      env: { ...proxyEnv(ctx), ...envSetting(ctx.settings) },
      trajectoryFiles: [`${ctx.outDir}/harness-trajectory.jsonl`],
    };
  },
  report(stdout) {
    const capped = stdout.split("\n").some((l) => l.trim() === MAX_TURNS_LINE);
    return { reportedCostNanoUsd: null, status: capped ? "MAX_TURNS_EXCEEDED" : null };
  },
};
