/**
 * Scripted-provider scenarios that drive a harness to a known fix, for tests and for the offline main job. The step
 * is always read from the conversation itself, so concurrent attempts never share state.
 */
import path from "node:path";
import { isRecord } from "../providers/types.js";
import { codexShellScenario } from "./scenarios.js";
import type { Reply, ScriptedRequest } from "./types.js";

export interface FixFile {
  /** relative to the repository root, as the reference agent's tools take it */
  path: string;
  content: string;
}

/**
 * A scripted-provider scenario that drives the reference agent to a fix: read the first file, write each file, then
 * finish. The step is the number of assistant turns so far.
 * `files` may depend on the request (e.g. pick a task's fix by its problem statement in the first user message).
 */
export function referenceFixScenario(opts: {
  files: FixFile[] | ((req: ScriptedRequest) => FixFile[]);
  usage?: Reply["usage"];
}): (req: ScriptedRequest) => Reply {
  return (req) => {
    const usage = opts.usage ? { usage: opts.usage } : {};
    const messages = Array.isArray(req.body.messages) ? req.body.messages : [];
    if (
      (req.endpoint !== "chat_completions" && req.endpoint !== "messages") ||
      !Array.isArray(req.body.tools)
    )
      return { text: "ok", ...usage };
    const files = typeof opts.files === "function" ? opts.files(req) : opts.files;
    const step = messages.filter((m) => isRecord(m) && m.role === "assistant").length;
    const first = files[0];
    if (step === 0 && first)
      return { toolCalls: [{ name: "read_file", input: { path: first.path } }], ...usage };
    const file = files[step - 1];
    if (file)
      return {
        toolCalls: [{ name: "write_file", input: { path: file.path, content: file.content } }],
        ...usage,
      };
    if (step === files.length + 1)
      return { toolCalls: [{ name: "finish", input: { summary: "fixed" } }], ...usage };
    return { text: "Done.", ...usage };
  };
}

/** The first user message of a chat request (where the reference agent puts the problem statement). */
export function firstUserText(req: ScriptedRequest): string {
  const messages = Array.isArray(req.body.messages) ? req.body.messages : [];
  for (const m of messages)
    if (isRecord(m) && m.role === "user" && typeof m.content === "string") return m.content;
  return "";
}

/** Claude Code's working directory, as its system prompt states it. */
export function claudeWorkdir(req: ScriptedRequest): string | undefined {
  const m = /(?:Primary working directory|Working directory): ([^\s"\\]+)/.exec(
    JSON.stringify(req.body.system ?? ""),
  );
  return m?.[1];
}

/**
 * Claude Code to a fix: for each file a `Read` then a `Write` (its Write tool refuses to overwrite a file it has not
 * read), then a final text. Relative paths resolve against the working directory its system prompt names, so the
 * scenario needs no knowledge of where the attempt's workdir is. Side calls without the Write tool get a short text.
 */
export function claudeFixScenario(opts: {
  files: FixFile[] | ((req: ScriptedRequest) => FixFile[]);
  usage?: Reply["usage"];
  doneText?: string;
}): (req: ScriptedRequest) => Reply {
  return (req) => {
    const usage = opts.usage ? { usage: opts.usage } : {};
    const tools = Array.isArray(req.body.tools) ? req.body.tools : [];
    if (req.provider !== "anthropic" || !tools.some((t) => isRecord(t) && t.name === "Write"))
      return { text: "ok", ...usage };
    let results = 0;
    for (const m of Array.isArray(req.body.messages) ? req.body.messages : []) {
      if (!isRecord(m) || m.role !== "user" || !Array.isArray(m.content)) continue;
      for (const c of m.content) if (isRecord(c) && c.type === "tool_result") results++;
    }
    const root = claudeWorkdir(req) ?? "/";
    const files = typeof opts.files === "function" ? opts.files(req) : opts.files;
    const file = files[Math.floor(results / 2)];
    if (!file) return { text: opts.doneText ?? "Done.", ...usage };
    const filePath = path.resolve(root, file.path);
    return results % 2 === 0
      ? {
          text: `Reading ${file.path}.`,
          toolCalls: [{ name: "Read", input: { file_path: filePath } }],
          ...usage,
        }
      : {
          text: `Writing ${file.path}.`,
          toolCalls: [{ name: "Write", input: { file_path: filePath, content: file.content } }],
          ...usage,
        };
  };
}

/** The tool names a request offers, in either wire format. */
export function toolNames(req: ScriptedRequest): string[] {
  const tools = Array.isArray(req.body.tools) ? req.body.tools : [];
  return tools
    .map((t) => (isRecord(t) ? (isRecord(t.function) ? t.function.name : t.name) : undefined))
    .filter((n): n is string => typeof n === "string");
}

/** Tool results the conversation already holds: chat `tool` messages, Anthropic tool_result blocks, Responses outputs. */
export function toolResults(req: ScriptedRequest): number {
  let n = 0;
  const items = [
    ...(Array.isArray(req.body.messages) ? req.body.messages : []),
    ...(Array.isArray(req.body.input) ? req.body.input : []),
  ];
  for (const m of items) {
    if (!isRecord(m)) continue;
    if (m.role === "tool" || m.type === "function_call_output") n++;
    if (Array.isArray(m.content)) for (const c of m.content) if (isRecord(c) && c.type === "tool_result") n++;
  }
  return n;
}

function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/**
 * opencode (either wire format): its `bash` tool writes each file, one per turn, then a final text. Requests without
 * the bash tool (its title generator) get a short text.
 */
export function opencodeFixScenario(opts: {
  files: FixFile[] | ((req: ScriptedRequest) => FixFile[]);
  usage?: Reply["usage"];
}): (req: ScriptedRequest) => Reply {
  return (req) => {
    const usage = opts.usage ? { usage: opts.usage } : {};
    if (!toolNames(req).includes("bash")) return { text: "Fix", ...usage };
    const files = typeof opts.files === "function" ? opts.files(req) : opts.files;
    const file = files[toolResults(req)];
    if (!file) return { text: "Done.", ...usage };
    const p = shellQuote(file.path);
    const command = `mkdir -p "$(dirname ${p})" && printf '%s' ${shellQuote(file.content)} > ${p}`;
    return { toolCalls: [{ name: "bash", input: { command, description: `Write ${file.path}` } }], ...usage };
  };
}

/** A task's known fix, told apart by its problem statement (which every harness's prompt carries verbatim). */
export interface TaskFix {
  problemStatement: string;
  files: FixFile[];
}

/**
 * One scenario for a whole task library: the reference agent (write_file), Claude Code (Write), opencode (bash) and
 * Codex (Responses) are each driven to the fix of whichever task the request is about, told apart by their tools.
 * Requests that name no known task, and side calls, get a short text.
 */
export function libraryFixScenario(
  fixes: readonly TaskFix[],
  opts: { usage?: Reply["usage"] } = {},
): (req: ScriptedRequest) => Reply {
  const pick = (req: ScriptedRequest): FixFile[] => {
    const text = JSON.stringify(req.body);
    const hit = fixes.find(
      (f) => f.problemStatement !== "" && text.includes(JSON.stringify(f.problemStatement).slice(1, -1)),
    );
    return hit?.files ?? [];
  };
  const usage = opts.usage ? { usage: opts.usage } : {};
  const reference = referenceFixScenario({ files: pick, ...usage });
  const claude = claudeFixScenario({ files: pick, ...usage });
  const opencode = opencodeFixScenario({ files: pick, ...usage });
  return (req) => {
    if (req.endpoint === "responses") return codexShellScenario({ files: pick(req), ...usage })(req);
    const tools = toolNames(req);
    if (tools.includes("write_file")) return reference(req);
    if (tools.includes("Write")) return claude(req);
    if (tools.includes("bash")) return opencode(req);
    return { text: "ok", ...usage };
  };
}
