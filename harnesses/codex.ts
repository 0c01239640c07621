import { mkdir, writeFile } from "node:fs/promises";
import { argsSetting, binPath, costOnlyReport, envSetting } from "./common.js";
import type { HarnessAdapter } from "./types.js";

const KEY_ENV = "EVALFLEET_HARNESS_KEY";

function tomlString(s: string): string {
  return JSON.stringify(s);
}

/**
 * Codex CLI `exec`. It ignores OPENAI_BASE_URL for its default provider, so CODEX_HOME gets a config.toml naming a
 * custom Responses-API provider at the shim. Its own retries are off: the shim already retries, and stacked retries
 * multiply calls. Codex has no turn or spend cap of its own; the shim enforces both.
 */
export const codex: HarnessAdapter = {
  kind: "codex",
  costMode: "shim",
  ownTurnCap: false,
  // Codex CLI 0.171: the first entry (priority 1) of the model catalogue it ships.
  defaultModel: { model: "gpt-6.2-sol", provider: "openai" },
  async prepare(ctx) {
    await mkdir(ctx.homeDir, { recursive: true });
    await writeFile(
      `${ctx.homeDir}/config.toml`,
      [
        `model = ${tomlString(ctx.model)}`,
        'model_provider = "evalfleet"',
        'approval_policy = "never"',
        'sandbox_mode = "danger-full-access"',
        "",
        "[model_providers.evalfleet]",
        'name = "evalfleet shim"',
        `base_url = ${tomlString(`${ctx.shimUrl}/v1`)}`,
        `env_key = "${KEY_ENV}"`,
        'wire_api = "responses"',
        "request_max_retries = 0",
        "stream_max_retries = 0",
        "",
      ].join("\n"),
    );
    return {
      command: binPath(ctx.settings, "codex", ctx.runtime),
      args: ["exec", "--skip-git-repo-check", "--json", ...argsSetting(ctx.settings), ctx.prompt],
      env: {
        HOME: ctx.homeDir,
        CODEX_HOME: ctx.homeDir,
        [KEY_ENV]: ctx.harnessKey,
        ...envSetting(ctx.settings),
      },
      stdoutIsTrajectory: true,
    };
  },
  report: costOnlyReport,
};
