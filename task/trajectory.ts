import type { LedgerCall } from "../protocol/messages.js";
import { redactSecrets } from "../protocol/redact.js";
import { readHarnessFile } from "./harness-files.js";

/** One harness file's records: JSON lines as objects, a whole-JSON file as one object, anything else as text. */
function records(text: string, file: string): unknown[] {
  const trimmed = text.trim();
  if (trimmed === "") return [];
  if (!trimmed.includes("\n") || trimmed.startsWith("[")) {
    try {
      return [{ source: "harness", file, event: JSON.parse(trimmed) }];
    } catch {
      // fall through to line by line
    }
  }
  return trimmed.split("\n").map((line) => {
    try {
      return { source: "harness", file, event: JSON.parse(line) };
    } catch {
      return { source: "harness", file, text: line };
    }
  });
}

/**
 * trajectory.jsonl: the shim's record of every model call (one ledger row each), then the harness's own trajectory
 * (its JSON-lines stdout or the files it wrote), every line redacted. Files are read only inside `roots`, never
 * through a link (readHarnessFile).
 */
export async function buildTrajectory(
  calls: readonly LedgerCall[],
  files: readonly string[],
  secrets: readonly string[],
  roots: readonly string[],
): Promise<{ text: string; harnessEvents: unknown[] }> {
  const harnessEvents: unknown[] = [];
  for (const f of files) {
    const text = await readHarnessFile(f, roots);
    if (text !== null) harnessEvents.push(...records(text, f.split("/").pop() ?? f));
  }
  const lines = [...calls.map((c) => ({ source: "shim", call: c })), ...harnessEvents].map((r) =>
    redactSecrets(JSON.stringify(r), secrets),
  );
  return { text: lines.length ? `${lines.join("\n")}\n` : "", harnessEvents };
}

/** Tool calls the harness made, counted from its trajectory: Anthropic tool_use blocks, OpenAI tool/function calls. */
export function countToolCalls(events: readonly unknown[]): number {
  let n = 0;
  const walk = (v: unknown, depth: number): void => {
    if (depth > 12 || v === null || typeof v !== "object") return;
    if (Array.isArray(v)) {
      for (const x of v) walk(x, depth + 1);
      return;
    }
    const o = v as Record<string, unknown>;
    // Codex reports an item when it starts and again when it completes: count the completion only.
    if (o.type === "item.started" || o.type === "item.updated") return;
    if (o.type === "tool_use" || o.type === "function_call" || o.type === "command_execution") n++;
    else if (o.type === "function" && typeof o.id === "string" && o.function) n++;
    for (const [k, x] of Object.entries(o)) if (k !== "input" && k !== "arguments") walk(x, depth + 1);
  };
  for (const e of events) walk(e, 0);
  return n;
}
