import { z } from "zod";

/*
 * The ATIF schema's constraints, written out for the tests from its published specification: Harbor's RFC 0001
 * "Agent Trajectory Interchange Format (ATIF) Specification", v1.4 (github.com/laude-institute/harbor,
 * docs/rfcs/0001-trajectory-format.md; harborframework.com/docs/trajectory-format), whose reference implementation
 * is Harbor's Pydantic models (src/harbor/models/trajectories/): every object closed to unknown fields
 * (`extra: "forbid"`; custom data goes in the `extra` objects), step ids sequential from 1, ISO 8601 timestamps,
 * `source` one of system / user / agent, the agent-only fields (model_name, reasoning_effort, reasoning_content,
 * tool_calls, metrics) only on agent steps, and every observation's source_call_id naming a tool call of its step.
 */

const extra = z.record(z.string(), z.unknown()).optional();
const count = z.number().int().nonnegative();
const iso8601 = z
  .string()
  .regex(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/, "must be an ISO 8601 timestamp");

const Agent = z.strictObject({
  name: z.string(),
  version: z.string(),
  model_name: z.string().optional(),
  extra,
});

const ToolCall = z.strictObject({
  tool_call_id: z.string(),
  function_name: z.string(),
  arguments: z.record(z.string(), z.unknown()),
});

const SubagentRef = z.strictObject({
  session_id: z.string(),
  trajectory_path: z.string().nullable().optional(),
  extra,
});

const ObservationResult = z.strictObject({
  source_call_id: z.string().nullable().optional(),
  content: z.string().nullable().optional(),
  subagent_trajectory_ref: z.array(SubagentRef).nullable().optional(),
});

const Metrics = z.strictObject({
  prompt_tokens: count.optional(),
  completion_tokens: count.optional(),
  cached_tokens: count.optional(),
  cost_usd: z.number().nonnegative().optional(),
  prompt_token_ids: z.array(z.number().int()).optional(),
  completion_token_ids: z.array(z.number().int()).optional(),
  logprobs: z.array(z.number()).optional(),
  extra,
});

const AGENT_ONLY = ["model_name", "reasoning_effort", "reasoning_content", "tool_calls", "metrics"] as const;

const Step = z
  .strictObject({
    step_id: z.number().int().min(1),
    timestamp: iso8601.optional(),
    source: z.enum(["system", "user", "agent"]),
    model_name: z.string().optional(),
    reasoning_effort: z.union([z.string(), z.number()]).optional(),
    message: z.string(),
    reasoning_content: z.string().optional(),
    tool_calls: z.array(ToolCall).optional(),
    observation: z.strictObject({ results: z.array(ObservationResult) }).optional(),
    metrics: Metrics.optional(),
    extra,
  })
  .superRefine((s, ctx) => {
    if (s.source !== "agent")
      for (const f of AGENT_ONLY)
        if (s[f] !== undefined)
          ctx.addIssue({ code: "custom", path: [f], message: `only agent steps have ${f}` });
    if (s.observation && s.source === "user")
      ctx.addIssue({ code: "custom", path: ["observation"], message: "user steps have no observation" });
    const ids = new Set((s.tool_calls ?? []).map((t) => t.tool_call_id));
    for (const [i, r] of (s.observation?.results ?? []).entries())
      if (r.source_call_id && !ids.has(r.source_call_id))
        ctx.addIssue({
          code: "custom",
          path: ["observation", "results", i, "source_call_id"],
          message: `names no tool call of this step (${r.source_call_id})`,
        });
  });

const FinalMetrics = z.strictObject({
  total_prompt_tokens: count.optional(),
  total_completion_tokens: count.optional(),
  total_cached_tokens: count.optional(),
  total_cost_usd: z.number().nonnegative().optional(),
  total_steps: count.optional(),
  extra,
});

export const AtifTrajectorySchema = z
  .strictObject({
    schema_version: z.enum(["ATIF-v1.0", "ATIF-v1.1", "ATIF-v1.2", "ATIF-v1.3", "ATIF-v1.4"]),
    session_id: z.string(),
    agent: Agent,
    steps: z.array(Step),
    notes: z.string().optional(),
    final_metrics: FinalMetrics.optional(),
    extra,
  })
  .superRefine((t, ctx) => {
    for (const [i, s] of t.steps.entries())
      if (s.step_id !== i + 1)
        ctx.addIssue({
          code: "custom",
          path: ["steps", i, "step_id"],
          message: `must be ${i + 1} (sequential from 1)`,
        });
  });
