import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { TaskSpec } from "../protocol/config.js";
import { MAX_USD, nanoToNumber, usdToNano } from "../protocol/money.js";
import type { HarnessReport, HarnessRuntime } from "./types.js";

/** The evalfleet checkout (two folders up from shim/adapters), where node_modules/.bin holds the harness CLIs. */
export const EVALFLEET_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");

/**
 * A CLI shipped in evalfleet's node_modules/.bin, else the bare name (found on PATH). In a harness image
 * (`runtime`) the CLIs are in its layer, where they are looked for without checking from here.
 */
export function binPath(settings: Record<string, unknown>, name: string, runtime?: HarnessRuntime): string {
  const own = stringSetting(settings, "bin");
  if (own) return own;
  if (runtime) return path.posix.join(runtime.app, "node_modules", ".bin", name);
  const local = path.join(EVALFLEET_ROOT, "node_modules", ".bin", name);
  return existsSync(local) ? local : name;
}

export function stringSetting(settings: Record<string, unknown>, key: string): string | undefined {
  const v = settings[key];
  return typeof v === "string" && v !== "" ? v : undefined;
}

export function argsSetting(settings: Record<string, unknown>, key = "args"): string[] {
  const v = settings[key];
  return Array.isArray(v) ? v.filter((a): a is string => typeof a === "string") : [];
}

/** Extra environment the run config gives a harness (`settings.env`), never secrets: those stay in the shim. */
export function envSetting(settings: Record<string, unknown>): Record<string, string> {
  const v = settings.env;
  if (!v || typeof v !== "object") return {};
  const out: Record<string, string> = {};
  for (const [k, val] of Object.entries(v)) if (typeof val === "string") out[k] = val;
  return out;
}

/** The prompt every harness gets: the problem statement plus the ground rules of an evaluation attempt. */
export function buildPrompt(task: TaskSpec): string {
  const statement = task.problem_statement.trim() || `Complete task ${task.id}.`;
  return [
    statement,
    "",
    "The repository is checked out in the current working directory. Make the smallest change to the source that",
    "resolves the issue. Do not modify or add tests, do not commit, and stop when the change is made.",
  ].join("\n");
}

/** USD as a JSON number → integer nano-USD, or null when it is not a finite non-negative number. */
export function usdToNanoOrNull(v: unknown): number | null {
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0 || v > MAX_USD) return null;
  return nanoToNumber(usdToNano(v));
}

/**
 * The last cost a harness printed: a JSON line with `total_cost_usd` (Claude Code's result line, and what a command
 * harness may print), or a plain `evalfleet-cost-usd: 0.0123` line.
 */
export function reportedCost(stdout: string): number | null {
  let found: number | null = null;
  for (const line of stdout.split("\n")) {
    const t = line.trim();
    if (t.startsWith("{") && t.includes("cost_usd")) {
      try {
        const o = JSON.parse(t) as Record<string, unknown>;
        const c = usdToNanoOrNull(o.total_cost_usd ?? o.cost_usd);
        if (c !== null) found = c;
      } catch {
        // not JSON after all: ignore the line
      }
      continue;
    }
    const m = /^evalfleet-cost-usd:\s*([0-9]+(?:\.[0-9]+)?)\s*$/i.exec(t);
    if (m) found = usdToNanoOrNull(Number(m[1]));
  }
  return found;
}

export function costOnlyReport(stdout: string): HarnessReport {
  return { reportedCostNanoUsd: reportedCost(stdout), status: null };
}

/** npm packages of the harness CLIs evalfleet ships, by adapter: what `harness.version` pins. */
export const CLI_PACKAGES: Readonly<Record<string, string>> = {
  "claude-code": "@anthropic-ai/claude-code",
  codex: "@openai/codex",
  opencode: "opencode-ai",
};

/**
 * The version of the harness CLI an attempt would run: the shipped package's, or, for a CLI named by `settings.bin`,
 * what `<bin> --version` prints. Undefined when it cannot be told.
 */
export function installedCliVersion(adapter: string, settings: Record<string, unknown>): string | undefined {
  const own = stringSetting(settings, "bin");
  if (own) {
    const r = spawnSync(own, ["--version"], { encoding: "utf8", timeout: 15_000 });
    return /\d+\.\d+(?:\.\d+)?(?:[-+][\w.]+)?/.exec(`${r.stdout ?? ""} ${r.stderr ?? ""}`)?.[0];
  }
  const pkg = CLI_PACKAGES[adapter];
  if (!pkg) return undefined;
  try {
    const json = readFileSync(path.join(EVALFLEET_ROOT, "node_modules", pkg, "package.json"), "utf8");
    return (JSON.parse(json) as { version?: string }).version;
  } catch {
    return undefined;
  }
}

/** `2.1` pins 2.1.x; `2.1.197` pins exactly that; a leading `v` is ignored. */
export function versionMatches(pinned: string, installed: string): boolean {
  const p = pinned.trim().replace(/^v/, "");
  return installed === p || installed.startsWith(`${p}.`) || installed.startsWith(`${p}-`);
}

/**
 * The attempt's check of `harness.version` (null when it holds or is not set): the CLI that would run must be the
 * pinned one, else the attempt stops before the harness starts, saying which version it found and how to fix it.
 */
export function harnessVersionProblem(
  adapter: string,
  pinned: string | undefined,
  settings: Record<string, unknown>,
): string | null {
  if (pinned === undefined) return null;
  const installed = installedCliVersion(adapter, settings);
  if (installed === undefined)
    return `harness.version ${JSON.stringify(pinned)}: cannot tell which ${adapter} CLI version is installed (${CLI_PACKAGES[adapter] ?? "settings.bin"}); install it or drop harness.version`;
  if (!versionMatches(pinned, installed))
    return `harness.version ${JSON.stringify(pinned)} is pinned but ${adapter} ${installed} is installed; install ${CLI_PACKAGES[adapter] ?? "the CLI"}@${pinned} (or point settings.bin at it), or change harness.version`;
  return null;
}
