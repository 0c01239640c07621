import type { HarnessAdapter as AdapterKind } from "../protocol/config.js";
import type { AttemptStatus } from "../protocol/messages.js";

/** Everything an adapter needs to start its harness against one attempt's shim. */
export interface AdapterContext {
  /** the repository checkout at the task's base commit: the harness's working directory */
  workdir: string;
  /** a private folder outside the checkout for HOME and config files, so nothing there lands in the patch */
  homeDir: string;
  /** a folder outside the checkout where the harness may write its own trajectory */
  outDir: string;
  /** the shim's base URL, `http://127.0.0.1:PORT` (no `/v1`) */
  shimUrl: string;
  /** what the harness sends as its key: a dummy, since the shim swaps in the run's real key */
  harnessKey: string;
  /** the model id the harness asks for (the gateway alias, or the model name) */
  model: string;
  provider: "anthropic" | "openai";
  maxTurns: number | null;
  /** the task's prompt, built from its problem statement */
  prompt: string;
  /** the harness's `settings` from the run config (bin, extra args, command, ...) */
  settings: Record<string, unknown>;
  timeoutSeconds: number;
  /** where the harness's programs are as the harness sees them; absent: this machine's (the checkout's) */
  runtime?: HarnessRuntime;
}

/** Where node, the harness CLIs and the reference agent are, for a harness running in a container image. */
export interface HarnessRuntime {
  /** the node binary */
  node: string;
  /** a folder whose node_modules/.bin holds the harness CLIs (the checkout, on this machine) */
  app: string;
  /** argv that runs the built-in reference agent */
  referenceAgent: string[];
}

/** How to start the harness process. */
export interface HarnessLaunch {
  command: string;
  args: string[];
  /** the harness's whole environment besides PATH/LANG/TMPDIR: nothing else of the task's env is inherited */
  env: Record<string, string>;
  /** files the harness writes its own trajectory to (JSON lines), read after it exits */
  trajectoryFiles?: string[];
  /** true when stdout itself is the harness's trajectory (JSON lines) */
  stdoutIsTrajectory?: boolean;
}

/** What an adapter reads back from a finished harness. */
export interface HarnessReport {
  /** the cost the harness itself printed (client-side pricing), in nano-USD */
  reportedCostNanoUsd: number | null;
  /** a status the harness's own output proves (e.g. its own turn cap), overriding the exit code */
  status: AttemptStatus | null;
}

/**
 * How evalfleet metres a harness: `shim` — every call is priced by the shim (the figure that counts); `shim+reported`
 * — the harness also prints its own estimate, kept beside the shim's figure for comparison, never instead of it.
 */
export type AdapterCostMode = "shim" | "shim+reported";

export interface HarnessAdapter {
  readonly kind: AdapterKind;
  readonly costMode: AdapterCostMode;
  /** whether the harness enforces the turn cap itself (the shim enforces it for every harness regardless) */
  readonly ownTurnCap: boolean;
  /**
   * The model the harness's CLI uses when a user does not pick one (at the CLI version evalfleet ships), so its price
   * can be checked against the provider's list price.
   */
  readonly defaultModel?: { model: string; provider: "anthropic" | "openai" };
  prepare(ctx: AdapterContext): Promise<HarnessLaunch>;
  /** read the harness's own claims from its output; absent means nothing to read */
  report?(stdout: string): HarnessReport;
}
