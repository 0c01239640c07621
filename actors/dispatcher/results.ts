import type { JetStreamClient } from "@nats-io/jetstream";
import type { Logger } from "../../lib/log.js";
import { retry } from "../../lib/retry.js";
import { encodeJson } from "../../protocol/decode.js";
import { isStorageFull, storageFullError } from "../../protocol/errors.js";
import { MsgIds } from "../../protocol/ids.js";
import {
  type AttemptResult,
  AttemptResultSchema,
  type AttemptStatus,
  emptyUsage,
  MessageTypes,
} from "../../protocol/messages.js";
import { sanitizeOutput } from "../../protocol/redact.js";
import { Subjects } from "../../protocol/subjects.js";

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
    usage: opts.usage ?? emptyUsage(),
    numToolCalls: opts.numToolCalls ?? 0,
    patchHash: opts.patchHash ?? null,
    patchRef: opts.patchRef ?? null,
    patch: opts.patch ?? null,
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
    sandbox: opts.sandbox ?? null,
  };
}

/** Publish a result with the attempt's message id; `duplicate` is true when one was already there. */
export async function publishAttemptResult(
  js: JetStreamClient,
  r: AttemptResult,
  opts: { signal?: AbortSignal; log?: Logger } = {},
): Promise<{ duplicate: boolean }> {
  const { signal, log } = opts;
  let saidFull = false;
  const body = encodeJson(AttemptResultSchema, r, "attempt result");
  // The one record of how the attempt ended: it is tried again — through a NATS restart (no ack, no responders), or
  // JetStream's storage full — until it lands or the caller stops; the message id keeps a late second publish from
  // doubling it. A dropped stand-in would leave its cell running for ever: nothing else finishes it.
  const ack = await retry(
    () =>
      js.publish(Subjects.attempts.one(r.run, r.cellId, r.attempt), body, {
        msgID: MsgIds.attemptResult(r.run, r.cellId, r.attempt),
      }),
    {
      tries: signal ? Number.POSITIVE_INFINITY : 30,
      baseMs: 500,
      maxMs: 10_000,
      ...(signal ? { signal } : {}),
      onRetry: ({ error }) => {
        if (!isStorageFull(error) || saidFull) return;
        saidFull = true;
        log?.error(
          { run: r.run, cell: r.cellId, attempt: r.attempt },
          `the attempt's result waits for room: ${storageFullError(error).message}`,
        );
      },
    },
  );
  return { duplicate: ack.duplicate };
}
