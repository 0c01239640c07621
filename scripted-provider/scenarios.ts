import { isRecord } from "../providers/types.js";
import type { Reply, ScriptedRequest } from "./types.js";

/** A file a scripted agent writes: one tool call per file, one file per turn. */
export interface ScriptedFile {
  path: string;
  content: string;
}

interface StepOpts {
  files: ScriptedFile[];
  /** the final answer once every file is written */
  doneText?: string;
  /** usage reported on every reply (e.g. cache tokens) */
  usage?: Reply["usage"];
}

function toolNames(body: Record<string, unknown>): string[] {
  const tools = Array.isArray(body.tools) ? body.tools : [];
  return tools.map((t) => (isRecord(t) && typeof t.name === "string" ? t.name : "")).filter((n) => n !== "");
}

/**
 * Claude Code: each turn, a `Write` tool_use for the next file (absolute paths, as its Write tool requires); once the
 * conversation holds a tool_result per file, a final text. Requests without the Write tool (side calls such as titles)
 * get a short text.
 */
export function claudeWriteScenario(opts: StepOpts): (req: ScriptedRequest) => Reply {
  return (req) => {
    const usage = opts.usage ? { usage: opts.usage } : {};
    if (req.provider !== "anthropic" || !toolNames(req.body).includes("Write"))
      return { text: "ok", ...usage };
    const messages = Array.isArray(req.body.messages) ? req.body.messages : [];
    let results = 0;
    for (const m of messages) {
      if (!isRecord(m) || m.role !== "user" || !Array.isArray(m.content)) continue;
      for (const c of m.content) if (isRecord(c) && c.type === "tool_result") results++;
    }
    const file = opts.files[results];
    if (!file) return { text: opts.doneText ?? "Done.", ...usage };
    return {
      text: `Writing ${file.path}.`,
      toolCalls: [{ name: "Write", input: { file_path: file.path, content: file.content } }],
      ...usage,
    };
  };
}

function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/**
 * Codex CLI (Responses API): each turn, a shell tool call writing the next file (`exec_command` with `cmd`, or the
 * older `shell` with an argv), then a final message once a function_call_output per file came back.
 */
export function codexShellScenario(opts: StepOpts): (req: ScriptedRequest) => Reply {
  return (req) => {
    const usage = opts.usage ? { usage: opts.usage } : {};
    if (req.endpoint !== "responses") return { text: "ok", ...usage };
    const input = Array.isArray(req.body.input) ? req.body.input : [];
    const outputs = input.filter((i) => isRecord(i) && i.type === "function_call_output").length;
    const file = opts.files[outputs];
    if (!file) return { text: opts.doneText ?? "Done.", ...usage };
    const cmd = `mkdir -p "$(dirname ${shellQuote(file.path)})" && printf '%s' ${shellQuote(file.content)} > ${shellQuote(file.path)}`;
    const names = toolNames(req.body);
    const call = names.includes("exec_command")
      ? { name: "exec_command", input: { cmd } }
      : { name: "shell", input: { command: ["bash", "-lc", cmd] } };
    return { toolCalls: [call], ...usage };
  };
}
