import { mkdir, writeFile } from "node:fs/promises";
import path from "node:path";
import { argsSetting, binPath, costOnlyReport, envSetting } from "./common.js";
import type { HarnessAdapter } from "./types.js";

/**
 * opencode `run`. The provider's baseURL and apiKey must sit under `provider.<id>.options` in opencode.json
 * (top-level keys are ignored); the turn cap is the agent's `steps`. No spend cap of its own.
 */
export const opencode: HarnessAdapter = {
  kind: "opencode",
  costMode: "shim",
  ownTurnCap: true,
  // opencode with an Anthropic key picks the newest claude-sonnet-4 model first.
  defaultModel: { model: "claude-sonnet-4-5", provider: "anthropic" },
  async prepare(ctx) {
    const configDir = path.join(ctx.homeDir, ".config", "opencode");
    await mkdir(configDir, { recursive: true });
    const configFile = path.join(configDir, "opencode.json");
    const npm = ctx.provider === "anthropic" ? "@ai-sdk/anthropic" : "@ai-sdk/openai-compatible";
    const agent = ctx.maxTurns === null ? {} : { build: { steps: ctx.maxTurns } };
    await writeFile(
      configFile,
      JSON.stringify(
        {
          $schema: "https://opencode.ai/config.json",
          autoupdate: false,
          share: "disabled",
          provider: {
            evalfleet: {
              npm,
              name: "evalfleet shim",
              options: { baseURL: `${ctx.shimUrl}/v1`, apiKey: ctx.harnessKey },
              models: { [ctx.model]: { name: ctx.model } },
            },
          },
          model: `evalfleet/${ctx.model}`,
          agent,
          permission: { edit: "allow", bash: "allow", webfetch: "deny" },
        },
        null,
        2,
      ),
    );
    return {
      command: binPath(ctx.settings, "opencode", ctx.runtime),
      args: [
        "run",
        "--format",
        "json",
        "--model",
        `evalfleet/${ctx.model}`,
        ...argsSetting(ctx.settings),
        ctx.prompt,
      ],
      env: {
        HOME: ctx.homeDir,
        XDG_CONFIG_HOME: path.join(ctx.homeDir, ".config"),
        XDG_DATA_HOME: path.join(ctx.homeDir, ".local", "share"),
        OPENCODE_CONFIG: configFile,
        // offline: no update checks, no models.dev catalogue, no LSP or plugin downloads
        OPENCODE_DISABLE_AUTOUPDATE: "1",
        OPENCODE_DISABLE_MODELS_FETCH: "1",
        OPENCODE_DISABLE_LSP_DOWNLOAD: "1",
        OPENCODE_DISABLE_DEFAULT_PLUGINS: "1",
        ...envSetting(ctx.settings),
      },
      stdoutIsTrajectory: true,
    };
  },
  report: costOnlyReport,
};
