import { isRecord } from "../../providers/types.js";
import type { Reply, ScriptedRequest } from "../../scripts/scripted-provider/types.js";

export interface FixFile {
  /** relative to the repository root, as the reference agent's tools take it */
  path: string;
  content: string;
}

/**
 * A scripted-provider scenario that drives the reference agent to a fix: read the first file, write each file, then
 * finish. The step is read from the conversation (assistant turns so far), so concurrent attempts never share state.
 * `files` may depend on the request (e.g. pick a task's fix by its problem statement in the first user message).
 */
export function referenceFixScenario(opts: {
  files: FixFile[] | ((req: ScriptedRequest) => FixFile[]);
  usage?: Reply["usage"];
}): (req: ScriptedRequest) => Reply {
  return (req) => {
    const usage = opts.usage ? { usage: opts.usage } : {};
    const messages = Array.isArray(req.body.messages) ? req.body.messages : [];
    if (req.endpoint !== "chat_completions" || !Array.isArray(req.body.tools))
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
