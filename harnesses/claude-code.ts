import path from "node:path";
import { argsSetting, binPath, envSetting, usdToNanoOrNull } from "./common.js";
import type { HarnessAdapter, HarnessReport } from "./types.js";

/**
 * Claude Code in print mode. Pointed at the shim with ANTHROPIC_BASE_URL (no `/v1`); its HOME and config live in a
 * private folder so no user settings, credentials or telemetry leak in; `stream-json` makes stdout the trajectory
 * and ends with a result line carrying its own (client-side) cost estimate.
 */
export const claudeCode: HarnessAdapter = {
  kind: "claude-code",
  costMode: "shim+reported",
  ownTurnCap: true,
  // Claude Code 2.1 runs claude-opus-4-8 unless told otherwise.
  defaultModel: { model: "claude-opus-4-8", provider: "anthropic" },
  async prepare(ctx) {
    const args = ["-p", ctx.prompt, "--output-format", "stream-json", "--verbose", "--model", ctx.model];
    if (ctx.maxTurns !== null) args.push("--max-turns", String(ctx.maxTurns));
    const tools = ctx.settings.allowed_tools;
    // An allowed-tools list when the run config names one; otherwise every tool, without prompts (no one answers).
    if (Array.isArray(tools) && tools.length > 0)
      args.push("--allowed-tools", ...tools.filter((t): t is string => typeof t === "string"));
    else args.push("--dangerously-skip-permissions");
    args.push(...argsSetting(ctx.settings));
    return {
      command: binPath(ctx.settings, "claude", ctx.runtime),
      args,
      env: {
        HOME: ctx.homeDir,
        CLAUDE_CONFIG_DIR: path.join(ctx.homeDir, ".claude"),
        ANTHROPIC_BASE_URL: ctx.shimUrl,
        ANTHROPIC_API_KEY: ctx.harnessKey,
        // as root, --dangerously-skip-permissions is refused unless the process says it is sandboxed
        IS_SANDBOX: "1",
        DISABLE_TELEMETRY: "1",
        DISABLE_AUTOUPDATER: "1",
        DISABLE_ERROR_REPORTING: "1",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
        ...envSetting(ctx.settings),
      },
      stdoutIsTrajectory: true,
    };
  },
  report(stdout) {
    return claudeReport(stdout);
  },
};

/** The final `{"type":"result",...}` line: cost, and whether Claude Code stopped at its own turn cap. */
export function claudeReport(stdout: string): HarnessReport {
  const out: HarnessReport = { reportedCostNanoUsd: null, status: null };
  for (const line of stdout.split("\n")) {
    if (!line.startsWith("{") || !line.includes('"result"')) continue;
    try {
      const o = JSON.parse(line) as Record<string, unknown>;
      if (o.type !== "result") continue;
      out.reportedCostNanoUsd = usdToNanoOrNull(o.total_cost_usd);
      out.status = o.subtype === "error_max_turns" ? "MAX_TURNS_EXCEEDED" : null;
    } catch {
      // a partial line from a killed process
    }
  }
  return out;
}
