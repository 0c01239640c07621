import { resolve } from "node:path";
import { JUDGE_SYSTEM } from "../actors/judge/prompt.js";
import { loadTaskLibrary } from "../actors/planner/library.js";
import type { ProviderUpstreams } from "../config/index.js";
import type { Upstream } from "../gateway/server.js";
import type { Provider } from "../providers/types.js";
import { libraryFixScenario, type TaskFix } from "../scripted-provider/fixes.js";
import { libraryFixes } from "../scripted-provider/gold.js";
import {
  type ScriptedProvider,
  type ScriptedRequest,
  startScriptedProvider,
} from "../scripted-provider/index.js";
import type { Reply } from "../scripted-provider/types.js";

/** Where model calls go when the plane runs locally: real providers when their keys are set, else the scripted one. */
export interface LocalUpstreams {
  kind: "real" | "scripted";
  upstreams: Partial<Record<Provider, Upstream>>;
  scripted?: ScriptedProvider;
  describe: string;
}

/** The sample library's open-ended task has no gold patch; the scripted agent writes these notes for it. */
const OPEN_ENDED_NOTES = `# Extending calc.js

- mul(a, b): return a * b.
- div(a, b): throw a RangeError when b === 0, else return a / b. Division by zero must never return Infinity.
`;

/**
 * A scripted provider that plays the sample library: every harness is driven to its task's gold fix (told apart by
 * the problem statement its prompt carries), the open-ended task gets its notes, and the judge gets a verdict.
 */
export async function startSampleProvider(libraryDir: string, mirrorRoot: string): Promise<ScriptedProvider> {
  const library = await loadTaskLibrary(libraryDir);
  const tasks = [...library.tasks.values()];
  const openEnded = new Set(tasks.filter((t) => t.track === "open_ended").map((t) => t.problem_statement));
  const fixes: TaskFix[] = (await libraryFixes(tasks, libraryDir, mirrorRoot)).map((f) =>
    openEnded.has(f.problemStatement)
      ? { ...f, files: [{ path: "NOTES.md", content: OPEN_ENDED_NOTES }] }
      : f,
  );
  const play = libraryFixScenario(fixes, { usage: { cacheRead: 1200 } });
  // The smaller model gets one task wrong (a non-empty patch that fails its tests), so the sample shows a miss.
  const missed = fixes.map((f) =>
    f.problemStatement.includes("title()")
      ? {
          ...f,
          files: f.files.map((x) => ({
            ...x,
            content: `${x.content}\n// tried\n`.replace('split(" ")', 'split("-")'),
          })),
        }
      : f,
  );
  const playSmall = libraryFixScenario(missed, { usage: { cacheRead: 1200 } });
  const judgeSystem = JUDGE_SYSTEM.split("\n")[0] ?? "";
  const scenario = (req: ScriptedRequest): Reply => {
    if (JSON.stringify(req.body).includes(judgeSystem)) {
      const wroteNotes = JSON.stringify(req.body).includes("NOTES.md");
      return {
        text: JSON.stringify({
          score: wroteNotes ? 1 : 0,
          rationale: wroteNotes
            ? "NOTES.md proposes mul and div and handles division by zero."
            : "No notes were written.",
        }),
      };
    }
    return String(req.body.model ?? "").includes("haiku") ? playSmall(req) : play(req);
  };
  return await startScriptedProvider({ scenario });
}

/**
 * The real providers given (the caller passes them only when asked: `--real-providers`), else the scripted provider,
 * saying so when provider keys are set but unused.
 */
export async function localUpstreams(
  libraryDir: string,
  real: ProviderUpstreams,
  /** the tasks' git mirror cache (the scripted provider reads the sample fixes from mirrors there) */
  mirrorRoot: string,
  /** providers whose keys are set (named only), told to the user when they go unused */
  keysSet: readonly string[] = [],
): Promise<LocalUpstreams> {
  if (Object.keys(real).length > 0) {
    const upstreams: Partial<Record<Provider, Upstream>> = { ...real };
    return { kind: "real", upstreams, describe: `real providers (${Object.keys(upstreams).join(", ")})` };
  }
  const scripted = await startSampleProvider(libraryDir, mirrorRoot);
  const key = "scripted-upstream-key";
  return {
    kind: "scripted",
    scripted,
    upstreams: {
      anthropic: { provider: "anthropic", baseUrl: scripted.url, apiKey: key },
      openai: { provider: "openai", baseUrl: scripted.url, apiKey: key },
    },
    describe: `the scripted provider at ${scripted.url}${keysSet.length > 0 ? ` (${keysSet.join(", ")} keys are set but unused: pass --real-providers to call real providers)` : " (no provider keys set)"}`,
  };
}

/** The sample task library shipped with evalfleet. */
export const SAMPLE_LIBRARY = resolve(import.meta.dirname, "../examples/tasks");
