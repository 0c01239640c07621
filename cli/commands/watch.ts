import { type KV, type KvEntry, Kvm } from "@nats-io/kv";
import { Objm } from "@nats-io/obj";
import type { NatsConnection } from "@nats-io/transport-node";
import type { Command } from "commander";
import type { NatsSettings } from "../../config/index.js";
import { loadSettings } from "../../config/index.js";
import {
  eta,
  isTerminal,
  LiveKeys,
  LiveState,
  type RunSummary,
  snapshotBucket,
  summarize,
} from "../../dashboard/live.js";
import { planeNats } from "../../local/plane-nats.js";
import { connectNats, openPlane, type Plane } from "../../plane/connect.js";
import { ErrorCode, EvalfleetError } from "../../protocol/errors.js";
import { ProgressKeys } from "../../protocol/subjects.js";
import { Buckets, ObjectStores } from "../../protocol/topology.js";
import { usd } from "../../report/format.js";
import { printJson } from "./output.js";

/**
 * Open the plane for a viewer: no topology changes, and a message that says what to do when nothing answers.
 * The buckets are checked first on a connection of our own, closed either way: openPlane keeps its connection
 * open when a bucket is missing, and an open connection would keep the CLI from exiting after the error.
 */
export async function openViewerPlane(name: string, nats: NatsSettings): Promise<Plane> {
  const where = nats.servers.join(",");
  const unavailable = (why: string) =>
    new EvalfleetError(
      ErrorCode.Unavailable,
      `cannot read live state from NATS at ${where}: ${why}. Start the plane (evalfleet up) or set NATS_URL (and its credentials).`,
    );
  let nc: NatsConnection;
  try {
    nc = await connectNats(nats, { name, reconnect: false });
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
    return await openPlane({ name, nats, ensure: false });
  } catch (err) {
    throw unavailable((err as Error).message);
  }
}

/** The run to watch: the one named (it must have a progress key), else the most recently updated unfinished run. */
export async function resolveRun(kv: KV, run: string | undefined, where: string): Promise<string> {
  if (run !== undefined) {
    const e = await kv.get(ProgressKeys.run(run));
    if (e?.operation !== "PUT")
      throw new EvalfleetError(
        ErrorCode.NotFound,
        `run "${run}" has no progress in NATS at ${where}. List runs with: evalfleet status`,
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
      `no runs in the progress bucket at ${where}. Submit one with: evalfleet submit run.yaml`,
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

/** A string cut to `width` characters, with an ellipsis when cut. */
export function clip(text: string, width: number): string {
  const chars = [...text];
  if (chars.length <= width) return text;
  return width <= 1 ? chars.slice(0, width).join("") : `${chars.slice(0, width - 1).join("")}…`;
}

/** Screen columns a line takes (every character watch prints is one column wide). */
export function columnsOf(line: string): number {
  return [...line.replace(/\x1b\[[0-9;]*[A-Za-z]/g, "")].length;
}

/** How many screen rows `lines` take on a terminal `cols` wide (a longer line wraps onto more rows). */
export function screenRows(lines: readonly string[], cols: number): number {
  return lines.reduce((n, l) => n + Math.max(1, Math.ceil(columnsOf(l) / Math.max(1, cols))), 0);
}

/** Words of `text` laid out in lines of at most `width` columns (a word longer than a line is cut). */
function wordLines(text: string, width: number): string[] {
  const out: string[] = [];
  let cur = "";
  for (const word of text.split(" ")) {
    const w = clip(word, width);
    if (cur === "") cur = w;
    else if (columnsOf(cur) + 1 + columnsOf(w) <= width) cur = `${cur} ${w}`;
    else {
      out.push(cur);
      cur = w;
    }
  }
  out.push(cur);
  return out;
}

/**
 * One labelled line's parts laid out within `width`: parts joined by `sep` while they fit, continuing on lines
 * indented under the label; a part too long for a line of its own is broken between words.
 */
export function wrapParts(label: string, parts: readonly string[], width: number, sep = " · "): string[] {
  const indent = " ".repeat(Math.min(label.length, Math.max(0, width - 10)));
  const room = Math.max(1, width - indent.length);
  const out: string[] = [];
  let cur = clip(label, width);
  let empty = true;
  for (const part of parts) {
    const candidate = empty ? cur + part : `${cur}${sep}${part}`;
    if (columnsOf(candidate) <= width) {
      cur = candidate;
      empty = false;
      continue;
    }
    const pieces = wordLines(part, room);
    let rest = pieces;
    if (empty && columnsOf(cur) + columnsOf(pieces[0] ?? "") <= width) {
      cur += pieces[0] ?? "";
      rest = pieces.slice(1);
    } else out.push(cur);
    if (rest.length > 0) {
      if (rest !== pieces) out.push(cur);
      for (const piece of rest.slice(0, -1)) out.push(indent + piece);
      cur = indent + rest[rest.length - 1];
    }
    empty = false;
  }
  out.push(cur);
  return out;
}

/**
 * The text snapshot: cells by status, spend against the cap, tokens, pacer waits, fleet, ETA — every line at
 * most `width` columns (the bars shrink, long lines continue on the next), so a redraw can count its rows.
 */
export function renderText(
  s: RunSummary,
  e: { rate: number | null; etaMs: number | null },
  width = 80,
): string {
  const w = Math.max(20, width);
  const done = s.completed + s.failed + s.skipped;
  const cap = s.budgetNanoUsd;
  const barLine = (label: string, segments: Array<[number, string]>, total: number, rest: string[]) => {
    const [first = "", ...more] = rest;
    // The bar takes what the first figure leaves, from 8 to 32 cells.
    const barWidth = Math.max(8, Math.min(32, w - label.length - 3 - columnsOf(first)));
    return wrapParts(label, [`${bar(segments, total, barWidth)} ${first}`, ...more], w);
  };
  const lines = [
    ...wrapParts("", [`run ${s.run}`, s.phase, `(updated ${s.updatedAt})`], w, "  "),
    ...barLine(
      "cells   ",
      [
        [s.completed, "█"],
        [s.failed, "▓"],
        [s.skipped, "▒"],
        [s.running, "▚"],
      ],
      s.totalCells,
      [`${n(done)}/${n(s.totalCells)} done`],
    ),
    ...wrapParts(
      "        ",
      [
        `█ completed ${n(s.completed)}`,
        `▓ failed ${n(s.failed)}`,
        `▒ skipped ${n(s.skipped)}`,
        `▚ running ${n(s.running)}`,
        `░ pending ${n(s.pending)}`,
      ],
      w,
    ),
    ...(cap !== null && cap > 0
      ? barLine("spend   ", [[s.billableCostNanoUsd, "█"]], cap, [
          `billable ${usd(s.billableCostNanoUsd)} of ${usd(cap)} cap (${((100 * s.billableCostNanoUsd) / cap).toFixed(1)}%)`,
          `total ${usd(s.totalCostNanoUsd)}`,
        ])
      : wrapParts(
          "spend   ",
          [`billable ${usd(s.billableCostNanoUsd)}`, `total ${usd(s.totalCostNanoUsd)} (no cap)`],
          w,
        )),
    ...wrapParts(
      "tokens  ",
      [
        `in ${n(s.tokens.input)}`,
        `out ${n(s.tokens.output)}`,
        `cache read ${n(s.tokens.cacheRead)}`,
        `cache write ${n(s.tokens.cacheWrite)}`,
        `reasoning ${n(s.tokens.reasoning)}`,
      ],
      w,
    ),
    ...wrapParts(
      "pacer   ",
      [`waited ${duration(s.pacerWaitMs)} in total over ${n(s.cellsWithKeys)} cells`],
      w,
    ),
    ...wrapParts(
      "fleet   ",
      Object.entries(s.fleet).map(([pool, size]) => `${pool} ${size}`),
      w,
    ).map((l) => (l.trim() === "" ? "fleet   —" : l)),
    ...wrapParts(
      "ETA     ",
      [
        `${isTerminal(s.phase) ? "done" : duration(e.etaMs)}${e.rate !== null ? ` (${e.rate.toFixed(2)} cells/s)` : ""}`,
      ],
      w,
    ),
  ];
  if ((s.infraFailures ?? 0) > 0)
    lines.push(
      ...wrapParts(
        "infra   ",
        [`${n(s.infraFailures ?? 0)} infrastructure failures`, "not the model's: out of the resolved rate"],
        w,
      ),
    );
  if (s.securityEvents > 0)
    lines.push(
      ...wrapParts(
        "security ",
        [
          `${n(s.securityEvents)} forged messages refused (results, ledger calls or blob references)`,
          `see evalfleet report ${s.run}`,
        ],
        w,
      ),
    );
  if (s.message)
    for (const m of s.message.split("\n").slice(0, 6)) lines.push(...wrapParts("        ", [m], w));
  return lines.join("\n");
}

interface WatchFlags {
  stateDir?: string;
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
    .option(
      "--state-dir <dir>",
      "the state folder of the `up` to find when NATS_URL is unset (default .evalfleet)",
    )
    .option("--once", "print one snapshot and exit")
    .option("--interval-ms <ms>", "how often to redraw at most", "500")
    .action(async (runArg: string | undefined, flags: WatchFlags) => {
      const interval = Number(flags.intervalMs);
      if (!Number.isFinite(interval) || interval < 50)
        throw new EvalfleetError(
          ErrorCode.InvalidConfig,
          `--interval-ms must be a number >= 50, got "${flags.intervalMs}"`,
        );
      const nats = await planeNats(loadSettings("operator", { flags: { stateDir: flags.stateDir } }));
      const plane = await openViewerPlane("evalfleet-watch", nats);
      try {
        const kv = plane.kv.progress;
        const run = await resolveRun(kv, runArg, nats.servers.join(","));
        const state = new LiveState();
        // pool.<run>.<pool> keys are filtered by the run inside their value.
        const keys = [ProgressKeys.run(run), ProgressKeys.cellsOfRun(run), LiveKeys.pools];
        const apply = (e: KvEntry) => state.applyProgress(e);
        // Initial values first (one snapshot), then the same keys live.
        await Promise.all(keys.map((k) => snapshotBucket(kv, k, apply)));
        const samples: { atMs: number; done: number }[] = [];
        const tty = process.stdout.isTTY === true && !flags.json;
        const cols = () => (tty ? (process.stdout.columns ?? 80) : 100);
        let drawn: string[] = [];
        const draw = () => {
          const s = summarize(state, run);
          if (!s) return null;
          samples.push({ atMs: Date.now(), done: s.completed + s.failed + s.skipped });
          if (samples.length > 1000) samples.splice(0, samples.length - 1000);
          const e = eta(samples, s.pending + s.running);
          if (flags.json) printJson({ ...s, etaMs: e.etaMs, cellsPerSecond: e.rate });
          else {
            const text = renderText(s, e, cols());
            // Back to the first row of the last frame: its rows counted at today's width, so a line the terminal
            // wrapped (after a resize) is still erased.
            const up = tty && drawn.length > 0 ? `\x1b[${screenRows(drawn, cols())}F\x1b[J` : "";
            process.stdout.write(`${up}${text}\n${tty ? "" : "\n"}`);
            drawn = text.split("\n");
          }
          return s;
        };
        const first = draw();
        if (flags.once || (first && isTerminal(first.phase))) {
          if (first?.phase === "rejected") process.exitCode = 2;
          return;
        }
        let changed = false;
        const onResize = () => {
          changed = true;
        };
        process.stdout.on("resize", onResize);
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
        process.stdout.off("resize", onResize);
      } finally {
        await plane.close();
      }
    });
}
