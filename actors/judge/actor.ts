/**
 * The judge: for open_ended tasks, after an attempt lands, read its trajectory and patch from the object store,
 * ask the run's judge model (through the gateway, under the judge's own key) to score the work against the task's
 * rubric, and publish a Verdict. Every judge call is billable to the run: one ledger message per call.
 */
import type { Logger } from "../../lib/log.js";
import type { Plane } from "../../plane/connect.js";
import { type ModelSpec, type RunConfig, RunConfigSchema, TaskSpecSchema } from "../../protocol/config.js";
import { decodeJson, encodeJson } from "../../protocol/decode.js";
import { ErrorCode, EvalfleetError, RetryableError, ValidationError } from "../../protocol/errors.js";
import { AttributionHeaders } from "../../protocol/headers.js";
import { MsgIds } from "../../protocol/ids.js";
import {
  CellWorkSchema,
  type JudgeJob,
  JudgeJobSchema,
  type LedgerCall,
  LedgerCallSchema,
  MessageTypes,
  type Verdict,
  VerdictSchema,
} from "../../protocol/messages.js";
import { nanoToNumber, usdToNano } from "../../protocol/money.js";
import { StateKeys, Subjects } from "../../protocol/subjects.js";
import { Consumers } from "../../protocol/topology.js";
import { wireModelId } from "../../providers/run-prices.js";
import type { Db } from "../../store/db.js";
import { createJudgeKey } from "../../store/keys.js";
import { hasVerdict } from "../../store/results.js";
import { Actor, type Delivery } from "../runtime/actor.js";
import { readJob } from "../runtime/jobs.js";
import { foreignBlobRef, reportRefusals } from "../runtime/security.js";
import { callJudge, type JudgeAttempt, judgeEndpoint, priceTableFor } from "./call.js";
import { JUDGE_SYSTEM, judgePrompt, parseVerdict } from "./prompt.js";

export interface JudgeOptions {
  plane: Plane;
  db: Db;
  log: Logger;
  /** The gateway (or an Anthropic/OpenAI-compatible upstream), without /v1. */
  gatewayUrl: string;
  /**
   * A fixed key for every judge call (a deployment that manages the judge's key itself). Absent: the judge mints a
   * key of its own per run (kind `judge`, capped at the run's budget, revoked with the run's keys), so no key of the
   * judge's is ever in a task's environment.
   */
  judgeKey?: string;
  maxTokens?: number;
  concurrency?: number;
  /** HTTP attempts per call (rate limits, overload, 5xx). */
  maxHttpAttempts?: number;
  retryBaseDelayMs?: number;
  /** Calls per job when the answer has no readable score. */
  answerAttempts?: number;
}

/** The judge's key for one run: the configured one, else one minted per run and kept until the run ends. */
function judgeKeys(opts: JudgeOptions): {
  get(run: string, config: RunConfig, model: ModelSpec): Promise<string>;
  forget(run: string): void;
} {
  const minted = new Map<string, Promise<string>>();
  return {
    get(run, config, model) {
      if (opts.judgeKey) return Promise.resolve(opts.judgeKey);
      let k = minted.get(run);
      if (!k) {
        k = createJudgeKey(opts.db, {
          run,
          models: [wireModelId(model)],
          capNanoUsd: config.budget_usd === undefined ? null : nanoToNumber(usdToNano(config.budget_usd)),
        });
        k.catch(() => minted.delete(run));
        if (minted.size > 1024) minted.clear();
        minted.set(run, k);
      }
      return k;
    },
    forget(run) {
      minted.delete(run);
    },
  };
}

export async function startJudge(opts: JudgeOptions): Promise<Actor> {
  const actor = new Actor("judge", opts.plane, opts.log);
  const keys = judgeKeys(opts);
  await actor.start();
  await actor.consume({
    def: Consumers.judge,
    schema: JudgeJobSchema,
    what: "judge job",
    concurrency: opts.concurrency ?? 4,
    // Each delivery spends money: give up (with an event) rather than retry a hopeless job for ever.
    maxAttempts: 3,
    handle: async (d) => {
      await judgeOne(opts, d, actor, keys);
    },
    onPoison: async (raw, _subject, err) => {
      let job: JudgeJob;
      try {
        job = decodeJson(JudgeJobSchema, raw, "judge job");
      } catch {
        return;
      }
      await actor.publishEvent({
        run: job.run,
        kind: "poison",
        message: `judge gave up on ${job.cellId} attempt ${job.attempt}: ${err.message}`,
        data: { cellId: job.cellId, attempt: job.attempt, code: err.code },
      });
    },
  });
  return actor;
}

async function readBlob(plane: Plane, ref: string | null): Promise<string | null> {
  if (!ref) return null;
  const data = await plane.blobs.getBlob(ref);
  return data === null ? null : new TextDecoder().decode(data);
}

/** True when this attempt's verdict already landed (a redelivery after the ack was lost): do not pay twice. */
async function alreadyJudged(db: Db, job: JudgeJob): Promise<boolean> {
  try {
    return await hasVerdict(db, job.run, job.cellId, job.attempt);
  } catch {
    return false;
  }
}

function fatal(job: JudgeJob, reason: string): ValidationError {
  return new ValidationError(ErrorCode.InvalidMessage, `cannot judge ${job.run}/${job.cellId}: ${reason}`, [
    { path: "judge job", reason },
  ]);
}

/** Judge one attempt and publish its verdict; returns it (null when it had already landed). */
export async function judgeOne(
  opts: JudgeOptions,
  d: Delivery<JudgeJob>,
  actor: Actor,
  keys: ReturnType<typeof judgeKeys> = judgeKeys(opts),
): Promise<Verdict | null> {
  const job = d.value;
  const log = opts.log.child({ run: job.run, cell: job.cellId, attempt: job.attempt });
  if (await alreadyJudged(opts.db, job)) {
    log.info("verdict already landed; not judging again");
    return null;
  }
  const config = await readJob(opts.plane, StateKeys.jobRun(job.run), RunConfigSchema, "run config");
  if (!config) throw fatal(job, `run ${job.run} is not in the jobs bucket`);
  const judgeName = config.judge?.model;
  const model: ModelSpec | undefined = config.models.find((m) => m.name === judgeName);
  if (!model) throw fatal(job, `run ${job.run} names no judge model (judge.model in the run config)`);
  const task = await readJob(opts.plane, StateKeys.jobTask(job.run, job.taskId), TaskSpecSchema, "task spec");
  if (!task) throw fatal(job, `task ${job.taskId} is not in the jobs bucket`);
  const cell = await readJob(opts.plane, StateKeys.job(job.run, job.cellId), CellWorkSchema, "cell work");
  const traceId = `${cell?.traceId ?? job.cellId}__judge`;
  // Only the attempt's own blobs are read: a job naming another attempt's is judged as if they were absent.
  const own = (ref: string | null) => (foreignBlobRef(job, [ref]) === null ? ref : null);
  const foreign = [job.trajectoryRef, job.patchRef].filter((r): r is string => r !== null && own(r) === null);
  await reportRefusals(
    { db: opts.db, actor, log },
    foreign.map((ref) => ({
      run: job.run,
      cellId: job.cellId,
      attempt: job.attempt,
      check: "foreign_blob_ref" as const,
      ref,
      message: `judge refused blob ${JSON.stringify(ref)} for ${job.cellId} attempt ${job.attempt}: not one of the attempt's own blobs`,
    })),
  );
  const [trajectory, patch] = await Promise.all([
    readBlob(opts.plane, own(job.trajectoryRef)),
    job.patch !== null ? job.patch : readBlob(opts.plane, own(job.patchRef)),
  ]);

  const prices = priceTableFor(model);
  const apiKey = await keys.get(job.run, config, model);
  const user = judgePrompt(task, trajectory, patch);
  let spent = 0;
  let answer: ReturnType<typeof parseVerdict> = null;
  let lastText = "";
  for (let round = 0; round < (opts.answerAttempts ?? 2) && answer === null; round++) {
    const attempts = await callJudge(
      {
        baseUrl: opts.gatewayUrl,
        apiKey,
        model,
        system: JUDGE_SYSTEM,
        user,
        maxTokens: opts.maxTokens ?? 1024,
        headers: {
          [AttributionHeaders.cell]: job.cellId,
          [AttributionHeaders.trace]: traceId,
          [AttributionHeaders.attempt]: String(job.attempt),
        },
        signal: d.signal,
      },
      prices,
      {
        maxAttempts: opts.maxHttpAttempts ?? 3,
        baseDelayMs: opts.retryBaseDelayMs ?? 1_000,
        // The ledger message goes out as each call returns: spend is recorded even if this handler dies next.
        onAttempt: async (a, retries) => {
          spent += a.costNanoUsd;
          await publishLedger(opts.plane, ledgerOf(job, model, traceId, a, retries));
          d.working();
        },
      },
    );
    const last = attempts[attempts.length - 1] as JudgeAttempt;
    // A run's judge key revoked (its run ended and was resumed): mint a new one on the next delivery.
    if (last.httpStatus === 401) keys.forget(job.run);
    if (last.status !== "ok") {
      throw new RetryableError(
        ErrorCode.Unavailable,
        `judge model ${model.name} did not answer: ${last.error}`,
      );
    }
    lastText = last.text;
    answer = parseVerdict(last.text);
    if (!answer) log.warn({ text: last.text.slice(0, 500) }, "judge answer has no readable score");
  }
  if (!answer) {
    throw new EvalfleetError(
      ErrorCode.Internal,
      `judge model ${model.name} answered without a readable score: ${lastText.slice(0, 200)}`,
    );
  }
  const verdict: Verdict = {
    type: MessageTypes.verdict,
    run: job.run,
    cellId: job.cellId,
    attempt: job.attempt,
    score: answer.score,
    rationale: answer.rationale,
    judgeModel: model.name,
    costNanoUsd: spent,
    judgedAt: new Date().toISOString(),
  };
  await opts.plane.js.publish(
    Subjects.judgeResults.one(job.run),
    encodeJson(VerdictSchema, verdict, "verdict"),
    {
      msgID: MsgIds.verdict(job.run, job.cellId, job.attempt),
    },
  );
  log.info({ score: verdict.score, costNanoUsd: spent }, "judged");
  return verdict;
}

export function ledgerOf(
  job: JudgeJob,
  model: ModelSpec,
  traceId: string,
  a: JudgeAttempt,
  retries: number,
): LedgerCall {
  return {
    type: MessageTypes.ledgerCall,
    callId: a.callId,
    run: job.run,
    cellId: job.cellId,
    attempt: job.attempt,
    traceId,
    model: a.servedModel,
    alias: wireModelId(model),
    // the model's pool, shared with the harnesses calling it (the provider's limits are per key and model)
    pool: wireModelId(model),
    provider: model.provider,
    endpoint: judgeEndpoint(model),
    status: a.status,
    httpStatus: a.httpStatus,
    inputTokens: a.usage.inputTokens,
    outputTokens: a.usage.outputTokens,
    cacheReadTokens: a.usage.cacheReadTokens,
    cacheWriteTokens: a.usage.cacheWriteTokens,
    reasoningTokens: a.usage.reasoningTokens,
    costNanoUsd: a.costNanoUsd,
    priceVersion: a.priceVersion,
    latencyMs: a.latencyMs,
    ttfbMs: null,
    pacerWaitMs: 0,
    retries,
    clampedMaxTokens: null,
    estimated: false,
    // Judge spend is the platform's, billable to the run whatever the harness's own cost mode.
    costMode: "platform",
    startedAt: a.startedAt,
  };
}

async function publishLedger(plane: Plane, call: LedgerCall): Promise<void> {
  await plane.js.publish(
    Subjects.ledger.one(call.run, call.cellId, call.attempt),
    encodeJson(LedgerCallSchema, call, "ledger call"),
    {
      msgID: MsgIds.ledgerCall(call.callId),
    },
  );
}
