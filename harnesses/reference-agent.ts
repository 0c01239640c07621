/**
 * The built-in reference agent: a minimal tool loop that lists, reads and writes files in its working directory
 * until the model calls `finish`. It speaks OpenAI Chat Completions, or Anthropic Messages when EVALFLEET_PROVIDER
 * is `anthropic`, so it can run against every model of a run. It is a program (run as a child process by the
 * reference adapter), configured only through the environment the adapter sets.
 */
import { appendFileSync } from "node:fs";
import { mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { loadSettings, type ReferenceAgentSettings, SettingsError } from "../config/index.js";
import { formatIssues } from "../protocol/errors.js";

interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}
interface Message {
  role: "system" | "user" | "assistant" | "tool";
  content: string | null;
  tool_calls?: ToolCall[];
  tool_call_id?: string;
}

export const REFERENCE_TOOLS = [
  fn("list_files", "List the repository's files (paths relative to the root).", {}),
  fn("read_file", "Read one file.", { path: { type: "string" } }, ["path"]),
  fn(
    "write_file",
    "Replace one file's whole content (creating it if needed).",
    { path: { type: "string" }, content: { type: "string" } },
    ["path", "content"],
  ),
  fn("finish", "Stop: the fix is written.", { summary: { type: "string" } }),
];

/** The line the agent prints when it stops at its own turn cap (the adapter reads it back). */
export const MAX_TURNS_LINE = "evalfleet-reference: max turns reached";

function fn(name: string, description: string, properties: Record<string, unknown>, required: string[] = []) {
  return {
    type: "function",
    function: { name, description, parameters: { type: "object", properties, required } },
  };
}

const SKIP = new Set([".git", "node_modules"]);

async function listFiles(root: string, rel = "", out: string[] = []): Promise<string[]> {
  const entries = await readdir(path.join(root, rel), { withFileTypes: true });
  for (const e of entries.sort((a, b) => a.name.localeCompare(b.name))) {
    if (SKIP.has(e.name) || out.length >= 500) continue;
    const p = rel ? `${rel}/${e.name}` : e.name;
    if (e.isDirectory()) await listFiles(root, p, out);
    else if (e.isFile()) out.push(p);
  }
  return out;
}

/** A path inside the repository, or an error: the agent never reads or writes outside its working directory. */
function inside(root: string, p: unknown): string {
  if (typeof p !== "string" || p === "") throw new Error("path is required");
  const abs = path.resolve(root, p);
  if (abs !== root && !abs.startsWith(root + path.sep))
    throw new Error(`path ${p} is outside the repository`);
  if (abs.split(path.sep).includes(".git")) throw new Error("the .git folder is off limits");
  return abs;
}

async function runTool(root: string, call: ToolCall): Promise<{ result: string; finished: boolean }> {
  let args: Record<string, unknown> = {};
  try {
    args = JSON.parse(call.function.arguments || "{}") as Record<string, unknown>;
  } catch {
    return { result: "error: arguments are not valid JSON", finished: false };
  }
  try {
    switch (call.function.name) {
      case "list_files":
        return { result: (await listFiles(root)).join("\n"), finished: false };
      case "read_file":
        return { result: await readFile(inside(root, args.path), "utf8"), finished: false };
      case "write_file": {
        const abs = inside(root, args.path);
        if (typeof args.content !== "string") throw new Error("content must be a string");
        await mkdir(path.dirname(abs), { recursive: true });
        await writeFile(abs, args.content);
        return { result: `wrote ${args.content.length} characters to ${String(args.path)}`, finished: false };
      }
      case "finish":
        return { result: "ok", finished: true };
      default:
        return { result: `error: unknown tool ${call.function.name}`, finished: false };
    }
  } catch (err) {
    return { result: `error: ${err instanceof Error ? err.message : String(err)}`, finished: false };
  }
}

/** One model turn, whatever the wire format: the text and the tool calls it asked for. */
interface Turn {
  text: string | null;
  calls: ToolCall[];
  /** what to record in the trajectory for this turn */
  assistant: unknown;
}

/** A conversation in one provider's wire format. */
interface Conversation {
  send(): Promise<{ ok: true; turn: Turn } | { ok: false; status: number; body: string }>;
  addResults(results: Array<{ id: string; result: string }>): void;
}

const SYSTEM =
  "You are a careful software engineer fixing an issue in a repository. Use the tools to read the relevant " +
  "files, write the fixed files in full with write_file, then call finish.";

function openaiConversation(base: string, model: string, key: string, prompt: string): Conversation {
  const messages: Message[] = [
    { role: "system", content: SYSTEM },
    { role: "user", content: prompt },
  ];
  return {
    async send() {
      const res = await fetch(`${base}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
        body: JSON.stringify({ model, messages, tools: REFERENCE_TOOLS, tool_choice: "auto" }),
      });
      const text = await res.text();
      if (!res.ok) return { ok: false, status: res.status, body: text };
      const msg = (JSON.parse(text) as { choices?: Array<{ message?: Message }> }).choices?.[0]?.message;
      if (!msg) return { ok: false, status: res.status, body: "the reply has no message" };
      const reply: Message = { role: "assistant", content: msg.content ?? null };
      if (msg.tool_calls?.length) reply.tool_calls = msg.tool_calls;
      messages.push(reply);
      return { ok: true, turn: { text: msg.content ?? null, calls: msg.tool_calls ?? [], assistant: reply } };
    },
    addResults(results) {
      for (const r of results) messages.push({ role: "tool", tool_call_id: r.id, content: r.result });
    },
  };
}

interface AnthropicBlock {
  type: string;
  text?: string;
  id?: string;
  name?: string;
  input?: unknown;
  tool_use_id?: string;
  content?: string;
}

function anthropicConversation(base: string, model: string, key: string, prompt: string): Conversation {
  const tools = REFERENCE_TOOLS.map((t) => ({
    name: t.function.name,
    description: t.function.description,
    input_schema: t.function.parameters,
  }));
  const messages: Array<{ role: "user" | "assistant"; content: string | AnthropicBlock[] }> = [
    { role: "user", content: prompt },
  ];
  return {
    async send() {
      const res = await fetch(`${base}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-api-key": key, "anthropic-version": "2023-06-01" },
        body: JSON.stringify({ model, max_tokens: 4096, system: SYSTEM, messages, tools }),
      });
      const text = await res.text();
      if (!res.ok) return { ok: false, status: res.status, body: text };
      const content = (JSON.parse(text) as { content?: AnthropicBlock[] }).content ?? [];
      messages.push({ role: "assistant", content });
      const calls: ToolCall[] = content
        .filter((b) => b.type === "tool_use")
        .map((b) => ({
          id: b.id ?? "",
          type: "function",
          function: { name: b.name ?? "", arguments: JSON.stringify(b.input ?? {}) },
        }));
      const said = content
        .filter((b) => b.type === "text")
        .map((b) => b.text ?? "")
        .join("");
      return { ok: true, turn: { text: said || null, calls, assistant: { role: "assistant", content } } };
    },
    addResults(results) {
      if (results.length === 0) return;
      messages.push({
        role: "user",
        content: results.map((r) => ({ type: "tool_result", tool_use_id: r.id, content: r.result })),
      });
    },
  };
}

async function main(): Promise<number> {
  let s: ReferenceAgentSettings;
  try {
    s = loadSettings("reference-agent").agent;
  } catch (err) {
    if (!(err instanceof SettingsError)) throw err;
    process.stderr.write(`reference agent: ${err.message}\n${formatIssues(err.issues)}\n`);
    return 2;
  }
  const { baseUrl: base, model, maxTurns, trajectory } = s;
  const root = process.cwd();
  const files = await listFiles(root);
  const prompt = `${s.prompt}\n\nRepository files:\n${files.join("\n")}`;
  const conversation =
    s.provider === "anthropic"
      ? anthropicConversation(base, model, s.apiKey, prompt)
      : openaiConversation(base, model, s.apiKey, prompt);
  const record = (entry: Record<string, unknown>) => {
    if (trajectory) appendFileSync(trajectory, `${JSON.stringify(entry)}\n`);
  };
  for (let turn = 1; turn <= maxTurns; turn++) {
    const sent = await conversation.send();
    if (!sent.ok) {
      record({ turn, error: { status: sent.status, body: sent.body.slice(0, 2000) } });
      process.stderr.write(
        `reference agent: model call failed with HTTP ${sent.status}: ${sent.body.slice(0, 500)}\n`,
      );
      return 1;
    }
    const { turn: reply } = sent;
    const results: Array<{ id: string; name: string; result: string }> = [];
    let finished = reply.calls.length === 0;
    for (const call of reply.calls) {
      const r = await runTool(root, call);
      finished ||= r.finished;
      results.push({ id: call.id, name: call.function.name, result: r.result });
      process.stdout.write(`turn ${turn}: ${call.function.name} ${r.result.split("\n")[0]?.slice(0, 120)}\n`);
    }
    conversation.addResults(results);
    record({
      turn,
      assistant: reply.assistant,
      tool_results: results.map((r) => ({ ...r, result: r.result.slice(0, 4000) })),
    });
    if (finished) {
      process.stdout.write(`done after ${turn} turn(s)${reply.text ? `: ${reply.text}` : ""}\n`);
      return 0;
    }
  }
  process.stdout.write(`${MAX_TURNS_LINE}\n`);
  return 0;
}

// Only when run as a program: the adapter imports MAX_TURNS_LINE and the tool list from this module.
if (process.argv[1] && path.resolve(process.argv[1]) === path.resolve(new URL(import.meta.url).pathname)) {
  main().then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      process.stderr.write(`reference agent crashed: ${err instanceof Error ? err.stack : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
