import { createHash, randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import type { JetStreamClient } from "@nats-io/jetstream";
import type { KV } from "@nats-io/kv";
import type { ObjectStore } from "@nats-io/obj";
import type { NatsConnection } from "@nats-io/transport-node";
import { Client } from "undici";
import { type Logger, silentLogger } from "../../../lib/log.js";
import { RunConfigSchema } from "../../../protocol/config.js";
import { ErrorCode, EvalfleetError } from "../../../protocol/errors.js";
import {
  type AttemptStatus,
  type CellWork,
  CellWorkSchema,
  emptyUsage,
  inlinePatchText,
  type Usage,
} from "../../../protocol/messages.js";
import { BlobNames, StateKeys } from "../../../protocol/subjects.js";
import type { PriceTable } from "../../../providers/pricing.js";
import { runPriceTable } from "../../../providers/run-prices.js";
import { fetchAttemptKey } from "../../../task/job.js";
import { makeAttemptResult, publishAttemptResult } from "../results.js";
import { observeTracked } from "./tracked.js";
import type { JobRef, LaunchBackend, StopClass, TaskState } from "./types.js";

/** What the sim needs from the plane: publish results, read jobs by reference, store patches. */
export interface SimPlane {
  nc: NatsConnection;
  js: JetStreamClient;
  kv: { jobs: KV };
  blobs: ObjectStore;
}

export interface SimBackendOptions {
  plane: SimPlane;
  log?: Logger;
  /** metered model calls per attempt, each through a real shim to a provider (default 1; 0 = no calls) */
  calls?: number;
  /** simulated harness time per attempt, spread around the calls (default 50 ms) */
  thinkMs?: number | ((ref: JobRef) => number);
  /** the attempt's outcome; default: `mix`, or PATCH_READY */
  outcome?: (ref: JobRef) => AttemptStatus;
  /** weights per status, picked deterministically from (run, cell, attempt) */
  mix?: Partial<Record<AttemptStatus, number>>;
  /**
   * Where the shim forwards: a gateway (or provider) base URL, with `key` when given, else the run's gateway key
   * from the jobs bucket as `evalfleet task` reads it. Default: a scripted provider started on first use.
   */
  upstream?: { url: string; key?: string };
  /** tokens each scripted reply reports (default 1000 in / 100 out) */
  usagePerCall?: { input: number; output: number };
  /** with calls = 0: the usage every attempt reports */
  syntheticUsage?: Usage;
  /** every attempt, its calls and think time done, waits for this before it ends (a test holding all at once) */
  hold?: Promise<void>;
  /** bytes of padding added to every simulated patch (a patch past INLINE_PATCH_MAX_BYTES goes to the object store) */
  patchPadBytes?: number;
  /** called as each attempt starts running, with how many are running now */
  onRunning?: (running: number) => void;
}

interface SimTask {
  ref: JobRef;
  phase: TaskState["phase"];
  stop?: StopClass;
  abort: AbortController;
  stopReason?: string;
  /** closed with the backend: publish nothing */
  silent?: boolean;
}

type ShimModule = typeof import("../../../shim/index.js");
type ProviderModule = typeof import("../../../scripted-provider/index.js");
type SheetPrices = Parameters<Awaited<ReturnType<ProviderModule["startScriptedProvider"]>>["addPrices"]>[0];
interface RunPrices {
  prices: PriceTable;
  aliases: Record<string, string>;
  /** the run's config prices in the scripted provider's sheet form, for models its published sheet lacks */
  sheet: SheetPrices;
}

/**
 * Attempts completed in-process by a simulated harness that still makes real metered calls (a real shim per
 * attempt, forwarding to a scripted provider, publishing real ledger rows) and publishes real AttemptResults, with
 * a patch blob for PATCH_READY. For load and chaos tests: an attempt is a promise and a timer, so thousands at once
 * are cheap.
 */
export class SimBackend implements LaunchBackend {
  readonly name = "sim";
  private readonly tasks = new Map<string, SimTask>();
  /** attempts between the start and the end of their harness time */
  private harnessesRunning = 0;
  private seq = 0;
  /** handles are unique per backend: two in one process (a restarted dispatcher) never name each other's tasks */
  private readonly instance = randomBytes(3).toString("hex");
  private provider:
    | Promise<{ url: string; key: string; close(): Promise<void>; addPrices(p: SheetPrices): void }>
    | undefined;
  private readonly runPrices = new Map<string, Promise<RunPrices | null>>();
  private shimMod: Promise<ShimModule | null> | undefined;
  private readonly log: Logger;
  private readonly running = new Set<Promise<void>>();

  constructor(private readonly opts: SimBackendOptions) {
    this.log = opts.log ?? silentLogger();
  }

  async launch(refs: JobRef[]): Promise<Array<{ ref: JobRef; handle?: string; error?: StopClass }>> {
    return refs.map((ref) => {
      const handle = `sim-${process.pid}-${this.instance}-${++this.seq}`;
      const task: SimTask = { ref, phase: "running", abort: new AbortController() };
      this.tasks.set(handle, task);
      const p = this.runAttempt(task)
        .catch((err: unknown) => {
          this.log.error({ err: String(err), ref }, "sim attempt failed to publish");
          task.stop = { kind: "fatal", reason: String(err), neverStarted: false };
        })
        .finally(() => {
          task.phase = "stopped";
          task.stop ??= { kind: "exited", exitCode: 0 };
          this.running.delete(p);
        });
      this.running.add(p);
      return { ref, handle };
    });
  }

  async observe(handles: string[]): Promise<TaskState[]> {
    return observeTracked(this.tasks, handles, true);
  }

  async stop(handles: string[], reason: string): Promise<void> {
    for (const h of handles) {
      const t = this.tasks.get(h);
      if (!t || t.phase === "stopped") continue;
      t.stopReason = reason;
      t.abort.abort();
    }
  }

  /** Like a crash: running attempts vanish without a result (stop() is the polite way, with one). */
  async close(): Promise<void> {
    for (const t of this.tasks.values()) {
      t.silent = true;
      t.abort.abort();
    }
    // Nobody is left to see how they ended: a crashed host reports nothing.
    this.tasks.clear();
    await Promise.allSettled([...this.running]);
    const p = await this.provider?.catch(() => undefined);
    await p?.close();
  }

  private pick(ref: JobRef): AttemptStatus {
    if (this.opts.outcome) return this.opts.outcome(ref);
    const mix = Object.entries(this.opts.mix ?? {}) as Array<[AttemptStatus, number]>;
    const total = mix.reduce((a, [, w]) => a + w, 0);
    if (total <= 0) return "PATCH_READY";
    const h = createHash("sha1").update(`${ref.runName}/${ref.cellId}/${ref.attempt}`).digest();
    let x = (h.readUInt32BE(0) / 2 ** 32) * total;
    for (const [status, w] of mix) {
      if (x < w) return status;
      x -= w;
    }
    return mix[mix.length - 1]?.[0] ?? "PATCH_READY";
  }

  private async runAttempt(task: SimTask): Promise<void> {
    const { ref } = task;
    const startedAt = new Date().toISOString();
    const signal = task.abort.signal;
    const think =
      typeof this.opts.thinkMs === "function" ? this.opts.thinkMs(ref) : (this.opts.thinkMs ?? 50);
    const calls = this.opts.calls ?? 1;
    let status = this.pick(ref);
    let usage: Usage = this.opts.syntheticUsage ?? emptyUsage();
    let errorMessage: string | null = null;
    let failure: string | null = null;
    this.harnessesRunning++;
    this.opts.onRunning?.(this.harnessesRunning);
    try {
      if (calls > 0) ({ usage, failure } = await this.meteredCalls(ref, calls, think, signal));
      else await sleep(think, undefined, { signal });
      if (this.opts.hold) await Promise.race([this.opts.hold, aborted(signal)]);
    } catch (err) {
      if (!signal.aborted) throw err;
    } finally {
      this.harnessesRunning--;
    }
    if (task.silent) return;
    if (signal.aborted) {
      status = "HARNESS_ERROR";
      errorMessage = `stopped: ${task.stopReason ?? "stop requested"}`;
    } else if (failure) {
      // A harness whose model call failed outright (the shim cut the connection) crashes: its result still
      // carries what the calls so far were metered at.
      status = "HARNESS_ERROR";
      errorMessage = `sim harness: model call failed: ${failure}`;
    } else if (status === "HARNESS_ERROR") errorMessage = "simulated harness error";
    else if (status === "TIMEOUT") errorMessage = "simulated harness timeout";
    let patchRef: string | null = null;
    let patchHash: string | null = null;
    let patch: string | null = null;
    if (status === "PATCH_READY" || status === "BUDGET_EXCEEDED" || status === "MAX_TURNS_EXCEEDED") {
      const text = `diff --git a/sim.txt b/sim.txt\n--- a/sim.txt\n+++ b/sim.txt\n@@ -1 +1 @@\n-${ref.cellId}\n+${ref.cellId} fixed (attempt ${ref.attempt})\n${"+".repeat(this.opts.patchPadBytes ?? 0)}`;
      const bytes = new TextEncoder().encode(text);
      patchHash = createHash("sha256").update(bytes).digest("hex");
      // As a real task does: inline when small, else the object store.
      patch = inlinePatchText(bytes);
      if (patch === null) {
        patchRef = BlobNames.attempt(ref.runName, ref.cellId, ref.attempt, "patch.diff");
        await this.opts.plane.blobs.putBlob({ name: patchRef }, bytes);
      }
    }
    const exitCode = status === "TIMEOUT" ? null : status === "HARNESS_ERROR" ? 1 : 0;
    await publishAttemptResult(
      this.opts.plane.js,
      makeAttemptResult(ref, status, {
        exitCode,
        sandbox: "simulated",
        usage,
        patchRef,
        patch,
        patchHash,
        errorMessage,
        startedAt,
        stdout: `sim harness: ${calls} call(s), ${status}\n`,
      }),
      { signal: task.abort.signal, log: this.log },
    );
    task.stop = { kind: "exited", exitCode: exitCode ?? 124 };
  }

  /**
   * `calls` real calls through a real shim (ledger rows, progress, pricing), think time spread between them. A call
   * that fails outright ends the calls (`failure`); the usage is the shim's either way.
   */
  private async meteredCalls(
    ref: JobRef,
    calls: number,
    thinkMs: number,
    signal: AbortSignal,
  ): Promise<{ usage: Usage; failure: string | null }> {
    const work = await this.job(ref);
    const shimMod = await this.shimModule();
    const upstream = await this.upstream();
    if (!shimMod || !upstream) {
      await sleep(thinkMs, undefined, { signal });
      return { usage: this.opts.syntheticUsage ?? emptyUsage(), failure: null };
    }
    // Like a harness task: an explicit key wins, else the attempt's own key the dispatcher minted at launch.
    const key =
      upstream.key ?? (await fetchAttemptKey(this.opts.plane.kv.jobs, ref.runName, ref.cellId, ref.attempt));
    if (!key)
      throw new EvalfleetError(
        ErrorCode.InvalidConfig,
        `no gateway key: the jobs bucket has none for attempt ${ref.attempt} of ${ref.cellId} in run ${ref.runName}`,
      );
    // Priced as a task prices them: the run's config prices over the pinned data.
    const priced = await this.pricesOf(ref.runName);
    if (priced) upstream.addPrices?.(priced.sheet);
    const shim = await shimMod.startShim({
      ...(priced ? { prices: priced.prices, aliases: priced.aliases } : {}),
      upstream: upstream.url,
      run: ref.runName,
      cell: ref.cellId,
      attempt: ref.attempt,
      providerKey: key,
      nc: this.opts.plane.nc,
      pool: ref.pool,
      traceId: work?.traceId ?? ref.cellId,
      costMode: work?.costMode ?? "platform",
      retry: { baseDelayMs: 20, maxDelayMs: 500 },
      progressIntervalMs: 1_000,
      upstreamConnections: 4,
      logger: this.log,
    });
    let failure: string | null = null;
    // One keep-alive connection per simulated harness, as a CLI holds; undici's request, not fetch: thousands of
    // these run in one process under bench:scale, where fetch's per-call streams were most of the harness's CPU.
    const harness = new Client(shim.url, { pipelining: 1 });
    try {
      const gap = thinkMs / (calls + 1);
      for (let i = 0; i < calls; i++) {
        await sleep(gap, undefined, { signal });
        const res = await harness.request({
          path: "/v1/messages",
          method: "POST",
          headers: {
            "content-type": "application/json",
            "x-api-key": "sim-harness",
            "anthropic-version": "2023-06-01",
          },
          body: JSON.stringify({
            model: work?.model ?? "claude-sonnet-4-5",
            max_tokens: 256,
            messages: [{ role: "user", content: `fix ${ref.cellId} attempt ${ref.attempt} (call ${i})` }],
          }),
          signal,
        });
        await res.body.arrayBuffer();
      }
      await sleep(gap, undefined, { signal });
    } catch (err) {
      if (!signal.aborted) failure = err instanceof Error ? err.message : String(err);
    } finally {
      await harness.close().catch(() => {});
      await shim.close();
    }
    const t = shim.totals();
    const usage: Usage = {
      inputTokens: t.inputTokens,
      outputTokens: t.outputTokens,
      cacheReadTokens: t.cacheReadTokens,
      cacheWriteTokens: t.cacheWriteTokens,
      reasoningTokens: t.reasoningTokens,
      costNanoUsd: t.costNanoUsd,
      calls: t.calls,
    };
    return { usage, failure };
  }

  private pricesOf(run: string): Promise<RunPrices | null> {
    let p = this.runPrices.get(run);
    if (!p) {
      p = (async () => {
        const e = await this.opts.plane.kv.jobs.get(StateKeys.jobRun(run));
        if (!e || e.length === 0) return null;
        const r = RunConfigSchema.safeParse(e.json());
        if (!r.success) return null;
        const sheet: SheetPrices = {};
        for (const m of r.data.models) {
          const c = m.prices;
          if (!c) continue;
          sheet[m.alias ?? m.name] = {
            input: String(c.input_per_mtok),
            output: String(c.output_per_mtok),
            ...(c.cache_read_per_mtok !== undefined ? { cache_read: String(c.cache_read_per_mtok) } : {}),
            ...(c.cache_write_per_mtok !== undefined
              ? { cache_write_5m: String(c.cache_write_per_mtok) }
              : {}),
            ...(c.cache_write_1h_per_mtok !== undefined
              ? { cache_write_1h: String(c.cache_write_1h_per_mtok) }
              : {}),
          };
        }
        return { ...runPriceTable(r.data.models), sheet };
      })().catch(() => null);
      if (this.runPrices.size > 256) this.runPrices.clear();
      this.runPrices.set(run, p);
    }
    return p;
  }

  private async job(ref: JobRef): Promise<CellWork | null> {
    const e = await this.opts.plane.kv.jobs.get(StateKeys.job(ref.runName, ref.cellId));
    if (!e || e.length === 0) return null;
    const r = CellWorkSchema.safeParse(e.json());
    return r.success ? r.data : null;
  }

  /** The shim, when its module is importable (a colleague's work in progress must not break load tests). */
  private shimModule(): Promise<ShimModule | null> {
    this.shimMod ??= import("../../../shim/index.js").catch((err: unknown) => {
      this.log.warn({ err: String(err) }, "shim not importable: sim attempts report synthetic usage");
      return null;
    });
    return this.shimMod;
  }

  private async upstream(): Promise<{
    url: string;
    key?: string;
    addPrices?: (p: SheetPrices) => void;
  } | null> {
    if (this.opts.upstream) return this.opts.upstream;
    this.provider ??= (async () => {
      const mod: ProviderModule = await import("../../../scripted-provider/index.js");
      const u = this.opts.usagePerCall ?? { input: 1_000, output: 100 };
      const p = await mod.startScriptedProvider({ scenario: { text: "ok", usage: u } });
      return {
        url: p.url,
        key: "sk-sim-provider-key",
        close: () => p.close(),
        addPrices: (x: SheetPrices) => p.addPrices(x),
      };
    })();
    return await this.provider.catch((err: unknown) => {
      this.log.warn({ err: String(err) }, "scripted provider not available: synthetic usage");
      return null;
    });
  }
}

/** Resolves when the signal aborts (the attempt was stopped while it held). */
function aborted(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    else signal.addEventListener("abort", () => resolve(), { once: true });
  });
}
