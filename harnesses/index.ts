import type { HarnessAdapter as AdapterKind } from "../protocol/config.js";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import { claudeCode } from "./claude-code.js";
import { codex } from "./codex.js";
import { command, miniSweAgent } from "./command.js";
import { opencode } from "./opencode.js";
import { reference } from "./reference.js";
import type { HarnessAdapter } from "./types.js";

export { claudeCode, claudeReport } from "./claude-code.js";
export { codex } from "./codex.js";
export { command, commandLaunch, miniSweAgent, proxyEnv } from "./command.js";
export { buildPrompt, reportedCost } from "./common.js";
export { opencode } from "./opencode.js";
export { reference } from "./reference.js";
export { MAX_TURNS_LINE, REFERENCE_TOOLS } from "./reference-agent.js";
export type * from "./types.js";

const ADAPTERS: Partial<Record<AdapterKind, HarnessAdapter>> = {
  "claude-code": claudeCode,
  codex,
  opencode,
  "mini-swe-agent": miniSweAgent,
  command,
  reference,
};

/** The adapter for a harness kind. `sim` has none: the dispatcher's sim backend runs those attempts in-process. */
export function adapterFor(kind: AdapterKind): HarnessAdapter {
  const a = ADAPTERS[kind];
  if (!a)
    throw new EvalfleetError(
      ErrorCode.InvalidConfig,
      `harness adapter '${kind}' cannot run as a harness task`,
    );
  return a;
}
