import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import { argsSetting, costOnlyReport, envSetting, stringSetting } from "./common.js";
import type { AdapterContext, HarnessAdapter, HarnessLaunch } from "./types.js";

/**
 * The environment any OpenAI- or Anthropic-SDK based harness (and LiteLLM) reads to find its endpoint, all pointed
 * at the shim with the dummy key, plus the attempt's facts under EVALFLEET_* for scripts.
 */
export function proxyEnv(ctx: AdapterContext): Record<string, string> {
  return {
    HOME: ctx.homeDir,
    OPENAI_BASE_URL: `${ctx.shimUrl}/v1`,
    OPENAI_API_BASE: `${ctx.shimUrl}/v1`,
    OPENAI_API_KEY: ctx.harnessKey,
    ANTHROPIC_BASE_URL: ctx.shimUrl,
    ANTHROPIC_API_BASE: ctx.shimUrl,
    ANTHROPIC_API_KEY: ctx.harnessKey,
    EVALFLEET_BASE_URL: ctx.shimUrl,
    EVALFLEET_MODEL: ctx.model,
    EVALFLEET_PROVIDER: ctx.provider,
    EVALFLEET_PROMPT: ctx.prompt,
    EVALFLEET_MAX_TURNS: ctx.maxTurns === null ? "" : String(ctx.maxTurns),
    EVALFLEET_TRAJECTORY: `${ctx.outDir}/harness-trajectory.jsonl`,
  };
}

/**
 * `settings.command`: a string runs under `/bin/sh -c` (the prompt is in $EVALFLEET_PROMPT, never spliced into
 * the shell text), an array runs as argv. A harness that writes JSON lines to $EVALFLEET_TRAJECTORY has them kept.
 */
export function commandLaunch(ctx: AdapterContext, fallback?: string[]): HarnessLaunch {
  const cmd = ctx.settings.command;
  const env = { ...proxyEnv(ctx), ...envSetting(ctx.settings) };
  const trajectoryFiles = [`${ctx.outDir}/harness-trajectory.jsonl`];
  if (typeof cmd === "string" && cmd !== "")
    return { command: "/bin/sh", args: ["-c", cmd], env, trajectoryFiles };
  if (Array.isArray(cmd) && cmd.length > 0 && cmd.every((a) => typeof a === "string")) {
    const [command, ...args] = cmd as string[];
    return {
      command: command as string,
      args: [...args, ...argsSetting(ctx.settings)],
      env,
      trajectoryFiles,
    };
  }
  if (fallback) {
    const [command, ...args] = fallback;
    return {
      command: command as string,
      args: [...args, ...argsSetting(ctx.settings)],
      env,
      trajectoryFiles,
    };
  }
  throw new EvalfleetError(
    ErrorCode.InvalidConfig,
    "the command adapter needs settings.command (a shell string or an argv list)",
  );
}

/** A generic command harness: any program that finds its model endpoint through the usual environment variables. */
export const command: HarnessAdapter = {
  kind: "command",
  costMode: "shim",
  ownTurnCap: false,
  async prepare(ctx) {
    return commandLaunch(ctx);
  },
  report: costOnlyReport,
};

/**
 * mini-swe-agent and other LiteLLM harnesses: the endpoint comes from OPENAI_API_BASE / ANTHROPIC_API_BASE, the
 * model is `<provider>/<model>`. Its own cost_limit silently becomes 0 for models LiteLLM's cost map does not know,
 * so cost tracking errors are ignored and the shim's figure is the one that counts.
 */
export const miniSweAgent: HarnessAdapter = {
  kind: "mini-swe-agent",
  costMode: "shim",
  ownTurnCap: false,
  async prepare(ctx) {
    const bin = stringSetting(ctx.settings, "bin") ?? "mini";
    const launch = commandLaunch(ctx, [
      bin,
      "--yolo",
      "--exit-immediately",
      "--cost-limit",
      "0",
      "--model",
      `${ctx.provider}/${ctx.model}`,
      "--output",
      `${ctx.outDir}/mini-trajectory.json`,
      "--task",
      ctx.prompt,
    ]);
    launch.env.MSWEA_COST_TRACKING = "ignore_errors";
    launch.env.MSWEA_CONFIGURED = "true";
    launch.env.LITELLM_LOCAL_MODEL_COST_MAP = "True";
    launch.trajectoryFiles = [...(launch.trajectoryFiles ?? []), `${ctx.outDir}/mini-trajectory.json`];
    return launch;
  },
  report: costOnlyReport,
};
