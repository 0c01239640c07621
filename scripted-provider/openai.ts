import type { Plan, StreamScript } from "./wire.js";
import { id, sse } from "./wire.js";

function chatUsage(p: Plan): Record<string, unknown> {
  return {
    prompt_tokens: p.input + p.cacheRead,
    completion_tokens: p.output,
    total_tokens: p.input + p.cacheRead + p.output,
    prompt_tokens_details: { cached_tokens: p.cacheRead, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: p.reasoning, audio_tokens: 0 },
  };
}

function responsesUsage(p: Plan): Record<string, unknown> {
  return {
    input_tokens: p.input + p.cacheRead,
    input_tokens_details: { cached_tokens: p.cacheRead },
    output_tokens: p.output,
    output_tokens_details: { reasoning_tokens: p.reasoning },
    total_tokens: p.input + p.cacheRead + p.output,
  };
}

const hasTools = (p: Plan) => p.pieces.some((x) => x.kind === "tool");

export function chatJson(p: Plan): Record<string, unknown> {
  const text = p.pieces
    .filter((x) => x.kind === "text")
    .map((x) => x.full)
    .join("");
  const tools = p.pieces.filter((x) => x.kind === "tool");
  return {
    id: id("chatcmpl-"),
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model: p.model,
    choices: [
      {
        index: 0,
        message: {
          role: "assistant",
          content: text === "" ? null : text,
          refusal: null,
          ...(tools.length > 0
            ? {
                tool_calls: tools.map((t) => ({
                  id: t.id,
                  type: "function",
                  function: { name: t.name, arguments: t.full },
                })),
              }
            : {}),
        },
        logprobs: null,
        finish_reason: hasTools(p) ? "tool_calls" : "stop",
      },
    ],
    usage: chatUsage(p),
  };
}

export function chatStream(p: Plan, includeUsage: boolean): StreamScript {
  const base = {
    id: id("chatcmpl-"),
    object: "chat.completion.chunk",
    created: Math.floor(Date.now() / 1000),
    model: p.model,
  };
  const u = includeUsage ? { usage: null } : {};
  const chunk = (delta: Record<string, unknown>, finish: string | null = null) =>
    sse(undefined, { ...base, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...u });
  const head = [chunk({ role: "assistant", content: "", refusal: null })];
  const deltas: StreamScript["deltas"] = [];
  let toolIndex = 0;
  for (const x of p.pieces) {
    if (x.kind === "text") {
      for (const d of x.deltas)
        deltas.push({ text: chunk({ content: d }), bytes: Buffer.byteLength(d, "utf8") });
      continue;
    }
    const index = toolIndex++;
    const open = chunk({
      tool_calls: [{ index, id: x.id, type: "function", function: { name: x.name, arguments: "" } }],
    });
    x.deltas.forEach((d, i) => {
      deltas.push({
        text: (i === 0 ? open : "") + chunk({ tool_calls: [{ index, function: { arguments: d } }] }),
        bytes: Buffer.byteLength(d, "utf8"),
      });
    });
  }
  const tail = [chunk({}, hasTools(p) ? "tool_calls" : "stop")];
  if (includeUsage) tail.push(sse(undefined, { ...base, choices: [], usage: chatUsage(p) }));
  tail.push("data: [DONE]\n\n");
  return {
    head,
    deltas,
    tail,
    errorEvent: (type, message) => sse(undefined, { error: { message, type, code: null, param: null } }),
  };
}

function outputItems(p: Plan, ids: string[]): Record<string, unknown>[] {
  return p.pieces.map((x, i) =>
    x.kind === "text"
      ? {
          type: "message",
          id: ids[i],
          status: "completed",
          role: "assistant",
          content: [{ type: "output_text", text: x.full, annotations: [] }],
        }
      : {
          type: "function_call",
          id: ids[i],
          call_id: x.id,
          name: x.name,
          arguments: x.full,
          status: "completed",
        },
  );
}

function responseObject(
  p: Plan,
  respId: string,
  status: string,
  output: unknown[],
  usage: unknown,
): Record<string, unknown> {
  return {
    id: respId,
    object: "response",
    created_at: Math.floor(Date.now() / 1000),
    status,
    error: null,
    incomplete_details: null,
    model: p.model,
    output,
    parallel_tool_calls: true,
    usage,
  };
}

export function responsesJson(p: Plan): Record<string, unknown> {
  const ids = p.pieces.map((x) => id(x.kind === "text" ? "msg_" : "fc_"));
  return responseObject(p, id("resp_"), "completed", outputItems(p, ids), responsesUsage(p));
}

export function responsesStream(p: Plan): StreamScript {
  const respId = id("resp_");
  const ids = p.pieces.map((x) => id(x.kind === "text" ? "msg_" : "fc_"));
  const items = outputItems(p, ids);
  let seq = 0;
  const ev = (type: string, data: Record<string, unknown>) =>
    sse(type, { type, sequence_number: seq++, ...data });
  const head = [
    ev("response.created", { response: responseObject(p, respId, "in_progress", [], null) }),
    ev("response.in_progress", { response: responseObject(p, respId, "in_progress", [], null) }),
  ];
  const deltas: StreamScript["deltas"] = [];
  p.pieces.forEach((x, output_index) => {
    const item_id = ids[output_index];
    const done = items[output_index]!;
    if (x.kind === "text") {
      const open =
        ev("response.output_item.added", {
          output_index,
          item: { type: "message", id: item_id, status: "in_progress", role: "assistant", content: [] },
        }) +
        ev("response.content_part.added", {
          item_id,
          output_index,
          content_index: 0,
          part: { type: "output_text", text: "", annotations: [] },
        });
      x.deltas.forEach((d, i) => {
        deltas.push({
          text:
            (i === 0 ? open : "") +
            ev("response.output_text.delta", { item_id, output_index, content_index: 0, delta: d }),
          bytes: Buffer.byteLength(d, "utf8"),
        });
      });
      const close =
        ev("response.output_text.done", { item_id, output_index, content_index: 0, text: x.full }) +
        ev("response.content_part.done", {
          item_id,
          output_index,
          content_index: 0,
          part: { type: "output_text", text: x.full, annotations: [] },
        }) +
        ev("response.output_item.done", { output_index, item: done });
      const last = deltas[deltas.length - 1];
      if (last) last.text += close;
      return;
    }
    const open = ev("response.output_item.added", {
      output_index,
      item: {
        type: "function_call",
        id: item_id,
        call_id: x.id,
        name: x.name,
        arguments: "",
        status: "in_progress",
      },
    });
    x.deltas.forEach((d, i) => {
      deltas.push({
        text:
          (i === 0 ? open : "") +
          ev("response.function_call_arguments.delta", { item_id, output_index, delta: d }),
        bytes: Buffer.byteLength(d, "utf8"),
      });
    });
    const close =
      ev("response.function_call_arguments.done", { item_id, output_index, arguments: x.full }) +
      ev("response.output_item.done", { output_index, item: done });
    const last = deltas[deltas.length - 1];
    if (last) last.text += close;
  });
  const tail = [
    ev("response.completed", { response: responseObject(p, respId, "completed", items, responsesUsage(p)) }),
  ];
  return {
    head,
    deltas,
    tail,
    errorEvent: (type, message) =>
      ev("error", { code: type, message, param: null, error: { type, message } }),
  };
}
