import type { Plan, StreamScript } from "./wire.js";
import { id, sse } from "./wire.js";

function usage(p: Plan, output: number): Record<string, unknown> {
  return {
    input_tokens: p.input,
    cache_creation_input_tokens: p.cacheWrite5m + p.cacheWrite1h,
    cache_read_input_tokens: p.cacheRead,
    cache_creation: { ephemeral_5m_input_tokens: p.cacheWrite5m, ephemeral_1h_input_tokens: p.cacheWrite1h },
    output_tokens: output,
  };
}

function stopReason(p: Plan): string {
  return p.pieces.some((x) => x.kind === "tool") ? "tool_use" : "end_turn";
}

export function anthropicJson(p: Plan): Record<string, unknown> {
  return {
    id: id("msg_"),
    type: "message",
    role: "assistant",
    model: p.model,
    content: p.pieces.map((x) =>
      x.kind === "text"
        ? { type: "text", text: x.full }
        : { type: "tool_use", id: x.id.replace("call_", "toolu_"), name: x.name, input: JSON.parse(x.full) },
    ),
    stop_reason: stopReason(p),
    stop_sequence: null,
    usage: usage(p, p.output),
  };
}

export function anthropicStream(p: Plan): StreamScript {
  const msgId = id("msg_");
  const head = [
    sse("message_start", {
      type: "message_start",
      message: {
        id: msgId,
        type: "message",
        role: "assistant",
        model: p.model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        // output_tokens here is a placeholder, as on the real wire
        usage: usage(p, 1),
      },
    }),
  ];
  const deltas: StreamScript["deltas"] = [];
  p.pieces.forEach((x, index) => {
    const start =
      x.kind === "text"
        ? sse("content_block_start", {
            type: "content_block_start",
            index,
            content_block: { type: "text", text: "" },
          })
        : sse("content_block_start", {
            type: "content_block_start",
            index,
            content_block: { type: "tool_use", id: x.id.replace("call_", "toolu_"), name: x.name, input: {} },
          });
    const evs = x.deltas.map((d) =>
      sse("content_block_delta", {
        type: "content_block_delta",
        index,
        delta:
          x.kind === "text" ? { type: "text_delta", text: d } : { type: "input_json_delta", partial_json: d },
      }),
    );
    x.deltas.forEach((d, i) => {
      deltas.push({
        text: (i === 0 ? start + (index === 0 ? sse("ping", { type: "ping" }) : "") : "") + evs[i],
        bytes: Buffer.byteLength(d, "utf8"),
      });
    });
    // The block's stop rides on its last delta.
    const last = deltas[deltas.length - 1];
    if (last) last.text += sse("content_block_stop", { type: "content_block_stop", index });
  });
  const tail = [
    sse("message_delta", {
      type: "message_delta",
      delta: { stop_reason: stopReason(p), stop_sequence: null },
      usage: { output_tokens: p.output },
    }),
    sse("message_stop", { type: "message_stop" }),
  ];
  return {
    head,
    deltas,
    tail,
    errorEvent: (type, message) => sse("error", { type: "error", error: { type, message } }),
  };
}
