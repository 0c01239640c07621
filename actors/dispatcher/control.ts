import type { KV } from "@nats-io/kv";
import type { NatsConnection, Subscription } from "@nats-io/transport-node";
import { z } from "zod";
import type { Logger } from "../../lib/log.js";
import { decodeJson } from "../../protocol/decode.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { type Control, ControlSchema, MessageTypes } from "../../protocol/messages.js";
import { type ControlVerb, StateKeys, Subjects } from "../../protocol/subjects.js";

export type RunControlState = "active" | "draining" | "cancelled";

/** The `control` bucket's value for a run: every replica obeys it. */
export const ControlStateSchema = z.object({
  run: z.string(),
  state: z.enum(["active", "draining", "cancelled"]),
  verb: z.enum(["drain", "cancel", "resume"]),
  requestedBy: z.string(),
  at: z.string(),
});
export type ControlStateValue = z.output<typeof ControlStateSchema>;

export const ControlReplySchema = z.object({
  type: z.literal(MessageTypes.controlReply),
  run: z.string(),
  verb: z.enum(["drain", "cancel", "resume"]),
  ok: z.boolean(),
  state: z.enum(["active", "draining", "cancelled"]),
  previous: z.enum(["active", "draining", "cancelled"]),
  /** attempts this replica had running for the run when it answered */
  running: z.number().int().nonnegative(),
  message: z.string(),
  by: z.string(),
  /** resume: the run's stored config was submitted again (the planner requeues its incomplete cells) */
  resubmitted: z.boolean().default(false),
});
export type ControlReply = z.output<typeof ControlReplySchema>;

const STATE_OF: Record<ControlVerb, RunControlState> = {
  drain: "draining",
  cancel: "cancelled",
  resume: "active",
};

/**
 * Ask the dispatchers to drain, cancel or resume a run (request/reply on control.<run>.<verb>); the first replica
 * to answer replies, and all of them obey because the state is kept in the `control` bucket.
 */
export async function requestControl(
  nc: NatsConnection,
  run: string,
  verb: ControlVerb,
  opts: { timeoutMs?: number; requestedBy?: string } = {},
): Promise<ControlReply> {
  const req: Control = {
    type: MessageTypes.control,
    run,
    verb,
    requestedBy: opts.requestedBy ?? "cli",
    at: new Date().toISOString(),
  };
  try {
    const m = await nc.request(Subjects.control.one(run, verb), JSON.stringify(req), {
      timeout: opts.timeoutMs ?? 5_000,
    });
    return decodeJson(ControlReplySchema, m.data, "control reply");
  } catch (err) {
    if (err instanceof EvalfleetError) throw err;
    throw new EvalfleetError(
      ErrorCode.Unavailable,
      `no dispatcher answered ${verb} for run ${run}: is one running? (${err instanceof Error ? err.message : String(err)})`,
      { retryable: true, cause: err },
    );
  }
}

/**
 * Each replica's view of run control: a watch on the `control` bucket keeps it current (so a replica that missed
 * a request still obeys), and a subscription answers requests by writing the new state.
 */
export class ControlBoard {
  private readonly states = new Map<string, RunControlState>();
  private sub: Subscription | undefined;
  private watching: { stop(): void } | undefined;

  constructor(
    private readonly nc: NatsConnection,
    private readonly kv: KV,
    private readonly log: Logger,
    private readonly by: string,
    private readonly onChange: (run: string, state: RunControlState) => void,
    private readonly runningOf: (run: string) => number,
    /** resume: submit the run's stored config again; a message when that was not possible */
    private readonly resubmit: (req: Control) => Promise<string | null>,
    /** after a request is obeyed: tell the run's watchers (every replica calls it; dedupe by request) */
    private readonly announce: (req: Control, reply: ControlReply) => Promise<void>,
  ) {}

  state(run: string): RunControlState {
    return this.states.get(run) ?? "active";
  }

  /**
   * The run's state read from the bucket itself, not from the watch: another replica's cancel frees capacity the
   * moment it is written, and a launch into that capacity must not wait for this replica's watch to catch up.
   */
  async fresh(run: string): Promise<RunControlState> {
    const e = await this.kv.get(StateKeys.control(run));
    if (e && e.operation === "PUT" && e.length > 0) {
      const r = ControlStateSchema.safeParse(e.json());
      if (r.success) this.set(run, r.data.state);
    }
    return this.state(run);
  }

  async start(): Promise<void> {
    const w = await this.kv.watch();
    this.watching = w;
    let ready!: () => void;
    const initial = new Promise<void>((r) => {
      ready = r;
    });
    void (async () => {
      for await (const e of w) {
        if (e.operation === "PUT" && e.length > 0) {
          const r = ControlStateSchema.safeParse(e.json());
          if (r.success) this.set(r.data.run, r.data.state);
        }
        if (e.delta === 0) ready();
      }
    })().catch((err: unknown) => this.log.warn({ err: String(err) }, "control watch ended"));
    const empty = (await this.kv.status()).values === 0;
    if (empty) ready();
    await Promise.race([initial, new Promise((r) => setTimeout(r, 2_000))]);
    this.sub = this.nc.subscribe(Subjects.control.all, {
      callback: (err, msg) => {
        if (err) return;
        void this.handle(msg.data)
          .then((reply) => msg.respond(JSON.stringify(reply)))
          .catch((e: unknown) => this.log.warn({ err: String(e) }, "control request failed"));
      },
    });
  }

  private set(run: string, state: RunControlState): void {
    const was = this.state(run);
    this.states.set(run, state);
    if (was !== state) this.onChange(run, state);
  }

  private async handle(data: Uint8Array): Promise<ControlReply> {
    const req = decodeJson(ControlSchema, data, "control request");
    const previous = this.state(req.run);
    const state = STATE_OF[req.verb];
    const value: ControlStateValue = {
      run: req.run,
      state,
      verb: req.verb,
      requestedBy: req.requestedBy,
      at: new Date().toISOString(),
    };
    await this.kv.put(StateKeys.control(req.run), JSON.stringify(value));
    this.set(req.run, state);
    const running = this.runningOf(req.run);
    const problem = req.verb === "resume" ? await this.resubmit(req) : null;
    const message =
      req.verb === "drain"
        ? `run ${req.run} draining: no new launches; ${running} running attempt(s) here will finish`
        : req.verb === "cancel"
          ? `run ${req.run} cancelled: stopping ${running} running attempt(s) here; their cells end failed`
          : problem === null
            ? `run ${req.run} resumed: its stored config was submitted again; incomplete cells will run`
            : `run ${req.run} active again, but not resubmitted: ${problem}`;
    const reply: ControlReply = {
      type: MessageTypes.controlReply,
      run: req.run,
      verb: req.verb,
      ok: problem === null,
      state,
      previous,
      running,
      message,
      by: this.by,
      resubmitted: req.verb === "resume" && problem === null,
    };
    await this.announce(req, reply).catch((err: unknown) =>
      this.log.warn({ err: String(err) }, "control event not published"),
    );
    return reply;
  }

  async stop(): Promise<void> {
    this.sub?.unsubscribe();
    this.watching?.stop();
  }
}
