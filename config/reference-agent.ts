import { z } from "zod";
import {
  defineGroup,
  enumText,
  httpUrlText,
  intText,
  optionalText,
  requiredText,
  setting,
} from "./setting.js";

/** The built-in reference agent (a harness): its adapter sets these for each session. */
export interface ReferenceAgentSettings {
  baseUrl: string;
  model: string;
  maxTurns: number;
  trajectory?: string;
  prompt: string;
  provider: "anthropic" | "openai";
  apiKey: string;
}

export const referenceAgentGroup = defineGroup({
  name: "reference-agent",
  doc: "The built-in reference agent, set by its adapter for each session.",
  settings: {
    baseUrl: setting({
      env: "EVALFLEET_BASE_URL",
      doc: "the shim's base URL the agent calls",
      schema: z.string({ error: "is not set: the adapter sets it" }).pipe(httpUrlText),
    }),
    model: setting({
      env: "EVALFLEET_MODEL",
      doc: "model name",
      schema: requiredText("the adapter sets it"),
    }),
    maxTurns: setting({
      env: "EVALFLEET_MAX_TURNS",
      doc: "turn limit",
      schema: intText(1, 100_000),
      default: "30",
    }),
    trajectory: setting({
      env: "EVALFLEET_TRAJECTORY",
      doc: "file to append the trajectory to",
      schema: optionalText,
    }),
    prompt: setting({ env: "EVALFLEET_PROMPT", doc: "the task's prompt", schema: z.string().optional() }),
    provider: setting({
      env: "EVALFLEET_PROVIDER",
      doc: "wire format: anthropic or openai",
      schema: enumText(["anthropic", "openai"] as const),
      default: "openai",
    }),
    anthropicKey: setting({
      env: "ANTHROPIC_API_KEY",
      doc: "key for the anthropic wire (the shim's placeholder)",
      schema: optionalText,
      secret: true,
    }),
    openaiKey: setting({
      env: "OPENAI_API_KEY",
      doc: "key for the openai wire (the shim's placeholder)",
      schema: optionalText,
      secret: true,
    }),
  },
  compile: (v): ReferenceAgentSettings => {
    const s: ReferenceAgentSettings = {
      baseUrl: v.baseUrl,
      model: v.model,
      maxTurns: v.maxTurns,
      prompt: v.prompt ?? "",
      provider: v.provider,
      apiKey: (v.provider === "anthropic" ? v.anthropicKey : v.openaiKey) ?? "",
    };
    if (v.trajectory !== undefined) s.trajectory = v.trajectory;
    return s;
  },
});
