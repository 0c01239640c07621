import type { ControlVerb } from "./subjects.js";

/**
 * Every JetStream message id (`Nats-Msg-Id`) evalfleet publishes with, defined once. An id is the message's natural
 * key, so a publish retried after a lost ack, a redelivered handler, or a second publisher of the same fact (the
 * task and the dispatcher's stand-in result) land once within the stream's duplicate window. The parts are names
 * the config admits (`NAME_PATTERN`: no `/`), cell ids, attempt numbers and timestamps, so `/` cannot be ambiguous.
 */
export const MsgIds = {
  /** A cell's work on `cells.<run>.<pool>`: the submission's stream sequence makes a resume re-queue, a redelivery not. */
  cellWork: (run: string, cellId: string, generation: number) => `${run}/${cellId}/${generation}`,
  /** One result per attempt, whoever publishes it (the task, or the dispatcher's stand-in when the task died). */
  attemptResult: (run: string, cellId: string, attempt: number) => `${run}/${cellId}/${attempt}`,
  /** The grade job the results-writer enqueues, and the grade result the grader-supervisor publishes (other stream). */
  grade: (run: string, cellId: string, attempt: number) => `${run}/${cellId}/${attempt}/grade`,
  /** The judge job for an open-ended attempt. */
  judgeJob: (run: string, cellId: string, attempt: number) => `${run}/${cellId}/${attempt}/judge`,
  /** The judge's verdict. */
  verdict: (run: string, cellId: string, attempt: number) => `${run}/${cellId}/${attempt}/verdict`,
  /** One ledger row per provider call: the call id (the shim's, or the judge's) is already unique. */
  ledgerCall: (callId: string) => callId,
  /** The event a control verb announces; every replica answering the same request publishes the same id. */
  controlEvent: (run: string, verb: ControlVerb, at: string) => `control/${run}/${verb}/${at}`,
  /** A resume's resubmission of the stored config: one per request, whichever replica answers it. */
  resume: (run: string, at: string) => `resume/${run}/${at}`,
} as const;
