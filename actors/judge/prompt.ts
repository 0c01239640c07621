/** What the judge is asked, and reading its answer back whatever shape the model wrapped it in. */
import type { TaskSpec } from "../../protocol/config.js";

/** Bytes of trajectory the judge sees: the head (how the agent started) and the tail (what it ended with). */
const TRAJECTORY_HEAD_BYTES = 16 * 1024;
const TRAJECTORY_TAIL_BYTES = 64 * 1024;
const PATCH_BYTES = 48 * 1024;

export const JUDGE_SYSTEM = [
  "You are a strict, fair evaluator of work done by a coding agent.",
  "Score the work against the rubric only. Answer with a single JSON object and nothing else:",
  '{"score": <number from 0 to 1>, "rationale": "<one short paragraph>"}',
].join("\n");

function clip(text: string, head: number, tail: number): string {
  if (text.length <= head + tail) return text;
  const cut = text.length - head - tail;
  return `${text.slice(0, head)}\n[... ${cut} characters omitted ...]\n${text.slice(-tail)}`;
}

export function judgePrompt(task: TaskSpec, trajectory: string | null, patch: string | null): string {
  const parts = [
    `## Task\n${task.problem_statement || "(no problem statement)"}`,
    `## Rubric\n${task.rubric ?? "(no rubric: judge whether the task was done well)"}`,
  ];
  parts.push(
    patch && patch.trim() !== ""
      ? `## Final diff of the agent's changes\n\`\`\`diff\n${clip(patch, PATCH_BYTES, 0)}\n\`\`\``
      : "## Final diff of the agent's changes\n(none)",
  );
  parts.push(
    trajectory && trajectory.trim() !== ""
      ? `## Agent trajectory\n${clip(trajectory, TRAJECTORY_HEAD_BYTES, TRAJECTORY_TAIL_BYTES)}`
      : "## Agent trajectory\n(none recorded)",
  );
  parts.push('Respond with only: {"score": <0..1>, "rationale": "..."}');
  return parts.join("\n\n");
}

export interface ParsedVerdict {
  score: number;
  rationale: string;
}

/** Every balanced {...} in the text, outermost first, skipping braces inside JSON strings. */
function objectCandidates(text: string): string[] {
  const out: string[] = [];
  for (let start = text.indexOf("{"); start !== -1; start = text.indexOf("{", start + 1)) {
    let depth = 0;
    let inString = false;
    for (let i = start; i < text.length; i++) {
      const ch = text[i];
      if (inString) {
        if (ch === "\\") i++;
        else if (ch === '"') inString = false;
      } else if (ch === '"') inString = true;
      else if (ch === "{") depth++;
      else if (ch === "}" && --depth === 0) {
        out.push(text.slice(start, i + 1));
        break;
      }
    }
  }
  return out;
}

/**
 * Scores come back as 0.7, "0.7", "70%", or on a 10- or 100-point scale despite the instructions; all mean the
 * same. Anything else (negative, above 100, not a number) is not a score.
 */
export function normaliseScore(raw: unknown): number | null {
  let n: number;
  let percent = false;
  if (typeof raw === "number") n = raw;
  else if (typeof raw === "string") {
    const m = /^\s*(-?\d+(?:\.\d+)?)\s*(%|\/\s*(?:10|100))?\s*$/.exec(raw);
    if (!m) return null;
    n = Number(m[1]);
    if (m[2] === "%") percent = true;
    else if (m[2]) return n / Number(m[2].replace(/\D/g, ""));
  } else return null;
  if (!Number.isFinite(n) || n < 0) return null;
  if (percent) return n <= 100 ? n / 100 : null;
  if (n <= 1) return n;
  if (n <= 10) return n / 10;
  if (n <= 100) return n / 100;
  return null;
}

function fromObject(value: unknown): ParsedVerdict | null {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return null;
  const rec = value as Record<string, unknown>;
  const score = normaliseScore(rec.score);
  if (score === null) return null;
  const rationale = rec.rationale ?? rec.reason ?? rec.reasoning ?? rec.explanation ?? "";
  return { score, rationale: typeof rationale === "string" ? rationale : JSON.stringify(rationale) };
}

/**
 * The judge's answer as {score, rationale}: a bare JSON object, one inside a ```json fence or prose, or as a last
 * resort `score: 0.7` written out. Null when there is no score to be found.
 */
export function parseVerdict(text: string): ParsedVerdict | null {
  const trimmed = text.trim();
  const unfenced = trimmed.replace(/^```(?:json)?\s*/i, "").replace(/\s*```$/, "");
  for (const candidate of [unfenced, ...objectCandidates(trimmed)]) {
    try {
      const v = fromObject(JSON.parse(candidate));
      if (v) return v;
    } catch {
      // not JSON; try the next candidate
    }
  }
  const m = /["']?score["']?\s*[:=]\s*["']?(-?\d+(?:\.\d+)?\s*%?)/i.exec(trimmed);
  const score = m ? normaliseScore(m[1]) : null;
  if (score === null) return null;
  const r = /["']?rationale["']?\s*[:=]\s*["']?([^"'\n]+)/i.exec(trimmed);
  return { score, rationale: r?.[1]?.trim() ?? trimmed.slice(0, 2000) };
}
