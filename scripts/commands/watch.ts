import { type KV, type KvEntry, Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { Command } from "commander";
import { natsUrl, openPlane, type Plane } from "../../actors/runtime/connect.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { ProgressKeys } from "../../protocol/subjects.js";
import { Buckets, ObjectStores } from "../../protocol/topology.js";
import {
  eta,
  isTerminal,
  LiveKeys,
  LiveState,
  type RunSummary,
  snapshotBucket,
  summarize,
} from "../dashboard/live.js";
import { usd } from "../report/format.js";
import { printJson } from "./output.js";

/**
 * Open the plane for a viewer: no topology changes, and a message that says what to do when nothing answers.
 * The buckets are checked first on a connection of our own, closed either way: openPlane keeps its connection
 * open when a bucket is missing, and an open connection would keep the CLI from exiting after the error.
 */
export async function openViewerPlane(name: string): Promise<Plane> {
  const unavailable = (why: string) =>
    new EvalfleetError(
      ErrorCode.Unavailable,
      `cannot read live state from NATS at ${natsUrl()}: ${why}. Start the plane (evalfleet up) or set NATS_URL.`,
    );
  let nc: NatsConnection;
  try {
    nc = await connect({ servers: natsUrl().split(","), name, timeout: 5_000 });
  } catch (err) {
    throw unavailable((err as Error).message);
  }
  try {
    const kvm = new Kvm(nc);
    const objm = new Objm(nc);
    for (const b of [Buckets.progress.name, Buckets.pacer.name])
      await kvm.open(b, { bindOnly: true }).then((kv) => kv.status());
    await objm.open(ObjectStores.blobs.name);
  } catch (err) {
    throw unavailable(`${(err as Error).message} (the plane has not created its buckets here)`);
  } finally {
    await nc.close();
  }
  try {
    return await openPlane({ name, ensure: false });
  } catch (err) {
    throw unavailable((err as Error).message);
  }
}

/** The run to watch: the one named (it must have a progress key), else the most recently updated unfinished run. */
export async function resolveRun(kv: KV, run: string | undefined): Promise<string> {
  if (run !== undefined) {
    const e = await kv.get(ProgressKeys.run(run));
    if (e?.operation !== "PUT")
      throw new EvalfleetError(
        ErrorCode.NotFound,
        `run "${run}" has no progress in NATS at ${natsUrl()}. List runs with: evalfleet status`,
      );
    return run;
  }
  const state = new LiveState();
  await snapshotBucket(kv, LiveKeys.runs, (e) => state.applyProgress(e));
  const names = state.runNames();
  const live = names.find((n) => !isTerminal(state.runs.get(n)!.phase));
  const pick = live ?? names[0];
  if (!pick)
    throw new EvalfleetError(
      ErrorCode.NotFound,
      `no runs in the progress bucket at ${natsUrl()}. Submit one with: evalfleet submit run.yaml`,
    );
  return pick;
}

/** A bar of `width` characters; segments in order, each with its own character. */
export function bar(segments: Array<[number, string]>, total: number, width = 32): string {
  if (total <= 0) return `[${" ".repeat(width)}]`;
  let out = "";
  let acc = 0;
  for (const [n, ch] of segments) {
    acc += n;
    const upto = Math.min(width, Math.round((acc / total) * width));
    out += ch.repeat(Math.max(0, upto - out.length));
  }
  return `[${out.padEnd(width, "░")}]`;
}

export function duration(ms: number | null): string {
  if (ms === null || !Number.isFinite(ms)) return "—";
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}

const n = (x: number) => x.toLocaleString("en-US");

/** The text snapshot: cells by status, spend against the cap, tokens, pacer waits, fleet, ETA. */
export function renderText(s: RunSummary, e: { rate: number | null; etaMs: number | null }): string {
  const done = s.completed + s.failed + s.skipped;
  const cap = s.budgetNanoUsd;
  const lines = [
    `run ${s.run}  ${s.phase}  (updated ${s.updatedAt})`,
    `cells   ${bar(
      [
        [s.completed, "█"],
        [s.failed, "▓"],
        [s.skipped, "▒"],
        [s.running, "▚"],
      ],
      s.totalCells,
    )} ${n(done)}/${n(s.totalCells)} done`,
    `        █ completed ${n(s.completed)} · ▓ failed ${n(s.failed)} · ▒ skipped ${n(s.skipped)} · ▚ running ${n(s.running)} · ░ pending ${n(s.pending)}`,
    cap !== null && cap > 0
      ? `spend   ${bar([[s.billableCostNanoUsd, "█"]], cap)} billable ${usd(s.billableCostNanoUsd)} of ${usd(cap)} cap (${((100 * s.billableCostNanoUsd) / cap).toFixed(1)}%) · total ${usd(s.totalCostNanoUsd)}`
      : `spend   billable ${usd(s.billableCostNanoUsd)} · total ${usd(s.totalCostNanoUsd)} (no cap)`,
    `tokens  in ${n(s.tokens.input)} · out ${n(s.tokens.output)} · cache read ${n(s.tokens.cacheRead)} · cache write ${n(s.tokens.cacheWrite)} · reasoning ${n(s.tokens.reasoning)}`,
    `pacer   waited ${duration(s.pacerWaitMs)} in total over ${n(s.cellsWithKeys)} cells`,
    `fleet   ${
      Object.entries(s.fleet)
        .map(([pool, size]) => `${pool} ${size}`)
        .join(" · ") || "—"
    }`,
    `ETA     ${isTerminal(s.phase) ? "done" : duration(e.etaMs)}${e.rate !== null ? ` (${e.rate.toFixed(2)} cells/s)` : ""}`,
  ];
  if (s.message) lines.push(`        ${s.message}`);
  return lines.join("\n");
}

interface WatchFlags {
  json?: boolean;
  once?: boolean;
  intervalMs: string;
}

export function register(program: Command): void {
  program
    .command("watch")
    .description(
      "Live progress of a run from KV: cells by status, spend against the cap, tokens, pacer waits, fleet, ETA",
    )
    .argument("[run]", "run name (default: the most recently updated unfinished run)")
    .option("--json", "print each snapshot as one JSON line")
    .option("--once", "print one snapshot and exit")
    .option("--interval-ms <ms>", "how often to redraw at most", "500")
    .action(async (runArg: string | undefined, flags: WatchFlags) => {
      const interval = Number(flags.intervalMs);
      if (!Number.isFinite(interval) || interval < 50)
        throw new EvalfleetError(
          ErrorCode.InvalidConfig,
          `--interval-ms must be a number >= 50, got "${flags.intervalMs}"`,
        );
      const plane = await openViewerPlane("evalfleet-watch");
      try {
        const kv = plane.kv.progress;
        const run = await resolveRun(kv, runArg);
        const state = new LiveState();
        // pool.<run>.<pool> keys are filtered by the run inside their value.
        const keys = [ProgressKeys.run(run), ProgressKeys.cellsOfRun(run), LiveKeys.pools];
        const apply = (e: KvEntry) => state.applyProgress(e);
        // Initial values first (one snapshot), then the same keys live.
        await Promise.all(keys.map((k) => snapshotBucket(kv, k, apply)));
        const samples: { atMs: number; done: number }[] = [];
        const tty = process.stdout.isTTY === true && !flags.json;
        let drawnLines = 0;
        const draw = () => {
          const s = summarize(state, run);
          if (!s) return null;
          samples.push({ atMs: Date.now(), done: s.completed + s.failed + s.skipped });
          if (samples.length > 1000) samples.splice(0, samples.length - 1000);
          const e = eta(samples, s.pending + s.running);
          if (flags.json) printJson({ ...s, etaMs: e.etaMs, cellsPerSecond: e.rate });
          else {
            const text = renderText(s, e);
            if (tty && drawnLines > 0) process.stdout.write(`\x1b[${drawnLines}F\x1b[J`);
            process.stdout.write(`${text}\n${tty ? "" : "\n"}`);
            drawnLines = text.split("\n").length;
          }
          return s;
        };
        const first = draw();
        if (flags.once || (first && isTerminal(first.phase))) {
          if (first?.phase === "rejected") process.exitCode = 2;
          return;
        }
        let changed = false;
        const watchers = await Promise.all(keys.map((k) => kv.watch({ key: k, include: "updates" })));
        for (const w of watchers)
          void (async () => {
            for await (const e of w) if (apply(e)) changed = true;
          })();
        await new Promise<void>((resolve) => {
          const timer = setInterval(
            () => {
              if (!changed) return;
              changed = false;
              const s = draw();
              if (s && isTerminal(s.phase)) {
                clearInterval(timer);
                if (s.phase === "rejected") process.exitCode = 2;
                resolve();
              }
            },
            tty ? interval : Math.max(interval, 2_000),
          );
          process.once("SIGINT", () => {
            clearInterval(timer);
            resolve();
          });
        });
        for (const w of watchers) w.stop();
      } finally {
        await plane.close();
      }
    });
}
