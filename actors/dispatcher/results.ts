import type { JetStreamClient } from "@nats-io/jetstream";
import { encodeJson } from "../../protocol/decode.js";
import {
  type AttemptResult,
  AttemptResultSchema,
  type AttemptStatus,
  MessageTypes,
  type Usage,
} from "../../protocol/messages.js";
import { sanitizeOutput } from "../../protocol/redact.js";
import { Subjects } from "../../protocol/subjects.js";

/** One result per attempt: the task and the dispatcher's fallback use the same id, so JetStream keeps the first. */
export function attemptMsgId(run: string, cell: string, attempt: number): string {
  return `${run}/${cell}/${attempt}`;
}

export const ZERO_USAGE: Usage = {
  inputTokens: 0,
  outputTokens: 0,
  cacheReadTokens: 0,
  cacheWriteTokens: 0,
  reasoningTokens: 0,
  costNanoUsd: 0,
  calls: 0,
};

/** An AttemptResult with everything not given empty. Output and error are redacted and cut to the last 50 KB. */
export function makeAttemptResult(
  ref: { runName: string; cellId: string; attempt: number },
  status: AttemptStatus,
  opts: Partial<Omit<AttemptResult, "type" | "run" | "cellId" | "attempt" | "status">> & {
    startedAt?: string;
  },
): AttemptResult {
  const finishedAt = opts.finishedAt ?? new Date().toISOString();
  const startedAt = opts.startedAt ?? finishedAt;
  return {
    type: MessageTypes.attemptResult,
    run: ref.runName,
    cellId: ref.cellId,
    attempt: ref.attempt,
    status,
    exitCode: opts.exitCode ?? null,
    usage: opts.usage ?? ZERO_USAGE,
    numToolCalls: opts.numToolCalls ?? 0,
    patchHash: opts.patchHash ?? null,
    patchRef: opts.patchRef ?? null,
    trajectoryRef: opts.trajectoryRef ?? null,
    stdout: sanitizeOutput(opts.stdout ?? ""),
    stderr: sanitizeOutput(opts.stderr ?? ""),
    errorMessage: opts.errorMessage == null ? null : sanitizeOutput(opts.errorMessage),
    harnessReportedCostNanoUsd: opts.harnessReportedCostNanoUsd ?? null,
    startedAt,
    finishedAt,
    latencyMs: opts.latencyMs ?? Math.max(0, Date.parse(finishedAt) - Date.parse(startedAt)),
    timeToFirstAttemptMs: opts.timeToFirstAttemptMs ?? null,
    phases: opts.phases ?? [],
  };
}

/** Publish a result with the attempt's message id; `duplicate` is true when one was already there. */
export async function publishAttemptResult(
  js: JetStreamClient,
  r: AttemptResult,
): Promise<{ duplicate: boolean }> {
  const ack = await js.publish(
    Subjects.attempts.one(r.run, r.cellId),
    encodeJson(AttemptResultSchema, r, "attempt result"),
    { msgID: attemptMsgId(r.run, r.cellId, r.attempt) },
  );
  return { duplicate: ack.duplicate };
}
