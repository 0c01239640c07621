/*
 * One attempt as an ATIF trajectory (Harbor's Agent Trajectory Interchange Format, RFC 0001 v1.4:
 * harborframework.com/docs/trajectory-format). The ledger is the spine: every model call the shim metered is one
 * agent step carrying its tokens, cost, latency and pacer wait. What the harness itself recorded (the reference
 * agent's turns, Claude Code's stream-json messages) gives those steps their text, tool calls and tool results
 * when the turns line up one to one with the calls; anything else is kept whole under the root's `extra`.
 */

import type { TrajectoryCall } from "../store/trajectories.js";

export const ATIF_VERSION = "ATIF-v1.4";

/** One ledger row of the attempt, as stored. */
export type AtifCall = Omit<TrajectoryCall, "cellId" | "attempt">;

export interface AtifAttempt {
  run: string;
  cellId: string;
  attempt: number;
  harness: string;
  /** the harness's adapter and pinned version, from the run config */
  adapter: string | null;
  harnessVersion: string | null;
  model: string;
  taskId: string;
  repeat: number | null;
  status: string | null;
  gradeStatus: string | null;
  resolved: boolean | null;
  errorClass: string | null;
  calls: readonly AtifCall[];
  /** trajectory.jsonl from the object store, when it could be read */
  trajectory: string | null;
}

export interface AtifToolCall {
  tool_call_id: string;
  function_name: string;
  arguments: Record<string, unknown>;
}

export interface AtifStep {
  step_id: number;
  timestamp?: string;
  source: "system" | "user" | "agent";
  model_name?: string;
  message: string;
  reasoning_content?: string;
  tool_calls?: AtifToolCall[];
  observation?: { results: Array<{ source_call_id?: string; content?: string }> };
  metrics?: {
    prompt_tokens: number;
    completion_tokens: number;
    cached_tokens: number;
    cost_usd: number;
    extra: Record<string, unknown>;
  };
  extra?: Record<string, unknown>;
}

export interface AtifTrajectory {
  schema_version: typeof ATIF_VERSION;
  session_id: string;
  agent: { name: string; version: string; model_name: string; extra: Record<string, unknown> };
  steps: AtifStep[];
  notes: string;
  final_metrics: {
    total_prompt_tokens: number;
    total_completion_tokens: number;
    total_cached_tokens: number;
    total_cost_usd: number;
    total_steps: number;
    extra: Record<string, unknown>;
  };
  extra: Record<string, unknown>;
}

/** What the harness said in one model turn. */
interface Turn {
  message: string;
  reasoning?: string;
  toolCalls: AtifToolCall[];
  results: Array<{ source_call_id: string; content: string }>;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const str = (v: unknown): string =>
  typeof v === "string" ? v : v === undefined || v === null ? "" : JSON.stringify(v);

function args(v: unknown): Record<string, unknown> {
  if (isObj(v)) return v;
  if (typeof v === "string") {
    try {
      const parsed: unknown = JSON.parse(v);
      if (isObj(parsed)) return parsed;
    } catch {
      // not JSON: kept as given
    }
    return { raw: v };
  }
  return v === undefined || v === null ? {} : { value: v };
}

/** Text, reasoning and tool calls of an assistant message in either provider's wire format. */
function assistantTurn(m: unknown): Turn {
  const turn: Turn = { message: "", toolCalls: [], results: [] };
  if (!isObj(m)) return turn;
  const texts: string[] = [];
  const thoughts: string[] = [];
  if (typeof m.content === "string") texts.push(m.content);
  if (Array.isArray(m.content))
    for (const b of m.content) {
      if (!isObj(b)) continue;
      if (b.type === "text") texts.push(str(b.text));
      else if (b.type === "thinking") thoughts.push(str(b.thinking));
      else if (b.type === "tool_use")
        turn.toolCalls.push({
          tool_call_id: str(b.id),
          function_name: str(b.name),
          arguments: args(b.input),
        });
    }
  if (Array.isArray(m.tool_calls))
    for (const c of m.tool_calls) {
      if (!isObj(c) || !isObj(c.function)) continue;
      turn.toolCalls.push({
        tool_call_id: str(c.id),
        function_name: str(c.function.name),
        arguments: args(c.function.arguments),
      });
    }
  turn.message = texts.join("\n");
  if (thoughts.length > 0) turn.reasoning = thoughts.join("\n");
  return turn;
}

function toolResultText(c: unknown): string {
  if (typeof c === "string") return c;
  if (Array.isArray(c))
    return c.map((b) => (isObj(b) && b.type === "text" ? str(b.text) : str(b))).join("\n");
  return str(c);
}

/**
 * The harness's own turns, when it recorded them in a shape we read: the reference agent's `{turn, assistant,
 * tool_results}` lines, or Claude Code's stream-json `assistant` messages (one per model call, grouped by message
 * id) and the `user` messages carrying their tool results. Returns what it could not place as well.
 */
export function harnessTurns(events: readonly unknown[]): { turns: Turn[]; other: unknown[] } {
  const turns: Turn[] = [];
  const other: unknown[] = [];
  const byMessageId = new Map<string, Turn>();
  const byToolId = new Map<string, Turn>();
  for (const e of events) {
    if (isObj(e) && typeof e.turn === "number" && "assistant" in e) {
      const t = assistantTurn(e.assistant);
      if (Array.isArray(e.tool_results))
        for (const r of e.tool_results)
          if (isObj(r)) t.results.push({ source_call_id: str(r.id), content: str(r.result) });
      turns.push(t);
    } else if (isObj(e) && e.type === "assistant" && isObj(e.message)) {
      const id = str(e.message.id);
      const part = assistantTurn(e.message);
      const t = id ? byMessageId.get(id) : undefined;
      if (t) {
        t.message = [t.message, part.message].filter(Boolean).join("\n");
        t.toolCalls.push(...part.toolCalls);
        if (part.reasoning) t.reasoning = [t.reasoning, part.reasoning].filter(Boolean).join("\n");
      } else {
        turns.push(part);
        if (id) byMessageId.set(id, part);
      }
      for (const c of part.toolCalls) byToolId.set(c.tool_call_id, t ?? part);
    } else if (isObj(e) && e.type === "user" && isObj(e.message) && Array.isArray(e.message.content)) {
      let placed = true;
      for (const b of e.message.content) {
        if (!isObj(b) || b.type !== "tool_result") {
          placed = false;
          continue;
        }
        const owner = byToolId.get(str(b.tool_use_id));
        if (owner)
          owner.results.push({ source_call_id: str(b.tool_use_id), content: toolResultText(b.content) });
        else placed = false;
      }
      if (!placed) other.push(e);
    } else other.push(e);
  }
  return { turns, other };
}

/** trajectory.jsonl's lines: the shim's call records and the harness's events (JSON or text lines). */
export function parseTrajectory(text: string | null): { shimCalls: Obj[]; harness: unknown[] } {
  const shimCalls: Obj[] = [];
  const harness: unknown[] = [];
  for (const line of (text ?? "").split("\n")) {
    if (line.trim() === "") continue;
    let rec: unknown;
    try {
      rec = JSON.parse(line);
    } catch {
      harness.push({ text: line });
      continue;
    }
    if (isObj(rec) && rec.source === "shim" && isObj(rec.call)) shimCalls.push(rec.call);
    else if (isObj(rec) && rec.source === "harness")
      harness.push("event" in rec ? rec.event : { text: rec.text });
    else harness.push(rec);
  }
  return { shimCalls, harness };
}

const usd = (nano: number) => nano / 1e9;

function callStep(id: number, c: AtifCall, turn: Turn | undefined, model: string): AtifStep {
  const step: AtifStep = {
    step_id: id,
    ...(c.startedAt ? { timestamp: c.startedAt } : {}),
    source: "agent",
    model_name: c.model ?? model,
    message: turn?.message ?? "",
    metrics: {
      // ATIF: prompt_tokens counts every input token, cached ones included (the ledger's inputTokens is that
      // total, normalised across providers); cached_tokens is the subset read from the cache.
      prompt_tokens: c.inputTokens,
      completion_tokens: c.outputTokens,
      cached_tokens: c.cacheReadTokens,
      cost_usd: usd(c.costNanoUsd),
      extra: {
        cost_nano_usd: c.costNanoUsd,
        uncached_input_tokens: Math.max(0, c.inputTokens - c.cacheReadTokens - c.cacheWriteTokens),
        cache_creation_input_tokens: c.cacheWriteTokens,
        reasoning_tokens: c.reasoningTokens,
        latency_ms: c.latencyMs,
        ttfb_ms: c.ttfbMs,
        pacer_wait_ms: c.pacerWaitMs ?? 0,
        retries: c.retries ?? 0,
        estimated: c.estimated,
        price_version: c.priceVersion,
      },
    },
    extra: { call_id: c.callId, status: c.status, http_status: c.httpStatus, voided: c.voided },
  };
  if (turn?.reasoning) step.reasoning_content = turn.reasoning;
  if (turn && turn.toolCalls.length > 0) step.tool_calls = turn.toolCalls;
  // Results are attached only to the step whose tool calls they answer (ATIF's source_call_id rule).
  const ids = new Set(turn?.toolCalls.map((t) => t.tool_call_id));
  const results = (turn?.results ?? []).filter((r) => ids.has(r.source_call_id));
  if (results.length > 0) step.observation = { results };
  return step;
}

/** A ledger row rebuilt from the shim's record in trajectory.jsonl (when the database has none for the attempt). */
function fromShimRecord(r: Obj): AtifCall {
  const n = (v: unknown) => (typeof v === "number" ? v : 0);
  return {
    callId: str(r.callId),
    model: typeof r.model === "string" ? r.model : null,
    status: str(r.status),
    httpStatus: typeof r.httpStatus === "number" ? r.httpStatus : null,
    inputTokens: n(r.inputTokens),
    outputTokens: n(r.outputTokens),
    cacheReadTokens: n(r.cacheReadTokens),
    cacheWriteTokens: n(r.cacheWriteTokens),
    reasoningTokens: n(r.reasoningTokens),
    costNanoUsd: n(r.costNanoUsd),
    latencyMs: n(r.latencyMs),
    ttfbMs: typeof r.ttfbMs === "number" ? r.ttfbMs : null,
    pacerWaitMs: n(r.pacerWaitMs),
    retries: n(r.retries),
    estimated: r.estimated === true,
    voided: false,
    priceVersion: typeof r.priceVersion === "string" ? r.priceVersion : null,
    startedAt: typeof r.startedAt === "string" ? r.startedAt : null,
  };
}

export function attemptToAtif(a: AtifAttempt): AtifTrajectory {
  const parsed = parseTrajectory(a.trajectory);
  const calls = a.calls.length > 0 ? [...a.calls] : parsed.shimCalls.map(fromShimRecord);
  const { turns, other } = harnessTurns(parsed.harness);
  const aligned = turns.length === calls.length;
  const steps: AtifStep[] = [
    {
      step_id: 1,
      source: "system",
      message: `evalfleet attempt ${a.attempt} of cell ${a.cellId} (run ${a.run}): harness ${a.harness}, model ${a.model}, task ${a.taskId}${
        a.repeat === null ? "" : `, repeat ${a.repeat}`
      }`,
    },
  ];
  for (const [i, c] of calls.entries())
    steps.push(callStep(steps.length + 1, c, aligned ? turns[i] : undefined, a.model));
  const sum = (f: (c: AtifCall) => number) => calls.reduce((s, c) => s + f(c), 0);
  const totalNano = sum((c) => c.costNanoUsd);
  return {
    schema_version: ATIF_VERSION,
    session_id: `${a.run}/${a.cellId}/${a.attempt}`,
    agent: {
      name: a.harness,
      version: a.harnessVersion ?? "unpinned",
      model_name: a.model,
      extra: { adapter: a.adapter },
    },
    steps,
    notes:
      "Written by evalfleet from its ledger (one agent step per metered model call: tokens, cost, latency and pacer " +
      "wait) and the harness's own trajectory." +
      (aligned || turns.length === 0
        ? ""
        : ` The harness recorded ${turns.length} turn(s) for ${calls.length} call(s), so its turns are kept under extra.harness_turns instead of on the steps.`),
    final_metrics: {
      total_prompt_tokens: sum((c) => c.inputTokens),
      total_completion_tokens: sum((c) => c.outputTokens),
      total_cached_tokens: sum((c) => c.cacheReadTokens),
      total_cost_usd: usd(totalNano),
      total_steps: steps.length,
      extra: {
        total_cost_nano_usd: totalNano,
        calls: calls.length,
        pacer_wait_ms: sum((c) => c.pacerWaitMs ?? 0),
        latency_ms: sum((c) => c.latencyMs ?? 0),
        reasoning_tokens: sum((c) => c.reasoningTokens),
        cache_creation_input_tokens: sum((c) => c.cacheWriteTokens),
      },
    },
    extra: {
      evalfleet: {
        run: a.run,
        cell_id: a.cellId,
        attempt: a.attempt,
        task_id: a.taskId,
        repeat: a.repeat,
        status: a.status,
        grade_status: a.gradeStatus,
        resolved: a.resolved,
        error_class: a.errorClass,
      },
      ...(aligned || turns.length === 0 ? {} : { harness_turns: turns }),
      ...(other.length > 0 ? { harness_events: other } : {}),
    },
  };
}
