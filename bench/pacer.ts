/**
 * `npm run bench:pacer` ("bench:pacer": "tsx bench/pacer.ts"): two processes × 50 callers on one pool through the
 * fleet pacer on a real nats-server. At R = 100, 1 000 and 5 000 admissions/s it prints the admitted rate against
 * R, wait p50 / p99, then the ceiling with no limit, then kills the process that owns the pool and shows the rate
 * recover in the survivor. The last line is one JSON object.
 */
import { Kvm } from "@nats-io/kv";
import { loadBenchSettings } from "../config/index.js";
import type { OwnerRecord } from "../pacer/fleet-pacer.js";
import { StateKeys } from "../protocol/subjects.js";
import { Buckets } from "../protocol/topology.js";
import { startNats } from "../test/helpers/nats.js";
import { countBins, percentiles, spawnWorker, type WorkerHandle } from "./pacer-run.js";

const BIN_MS = 100;
const CALLERS = loadBenchSettings("pacer").bench.callers;
const WARM_MS = 1000;
const nats = await startNats();
const log = (s: string) => process.stdout.write(`${s}\n`);

// A one-second burst: an owner stalled by a busy machine catches up afterwards instead of losing the time, so the
// long-run rate stays R; the pool starts empty, so the burst never inflates the start.
function startPair(pool: string, ratePerSecond: number, durationMs: number, burstMs = 1000): WorkerHandle[] {
  const startWallMs = Date.now() + 1500; // time for both processes to boot and connect
  return ["a", "b"].map((p) =>
    spawnWorker({
      id: `${pool}-${p}`,
      natsUrl: nats.url,
      natsCreds: nats.creds,
      pool,
      ratePerSecond,
      burstMs,
      callers: CALLERS,
      startWallMs,
      endWallMs: startWallMs + durationMs,
      binMs: BIN_MS,
    }),
  );
}

interface RateResult {
  targetPerSecond: number;
  admittedPerSecond: number;
  errorPct: number;
  waitP50Ms: number;
  waitP99Ms: number;
  perProcess: number[];
}

async function measure(ratePerSecond: number, durationMs: number): Promise<RateResult> {
  const pool = ratePerSecond > 0 ? `bench-r${ratePerSecond}` : "bench-ceiling";
  const workers = startPair(pool, ratePerSecond, durationMs);
  await Promise.all(workers.map((w) => w.done));
  const from = WARM_MS / BIN_MS;
  const to = durationMs / BIN_MS;
  const seconds = (durationMs - WARM_MS) / 1000;
  const admitted = countBins(workers, from, to) / seconds;
  const [p50 = 0, p99 = 0] = percentiles(workers, [0.5, 0.99]);
  return {
    targetPerSecond: ratePerSecond,
    admittedPerSecond: Math.round(admitted * 10) / 10,
    errorPct: ratePerSecond > 0 ? Math.round(((admitted - ratePerSecond) / ratePerSecond) * 10_000) / 100 : 0,
    waitP50Ms: p50,
    waitP99Ms: p99,
    perProcess: workers.map((w) => Math.round(countBins([w], from, to) / seconds)),
  };
}

const rates: RateResult[] = [];
for (const r of [100, 1000, 5000]) {
  const res = await measure(r, 8000);
  rates.push(res);
  log(
    `R=${r}/s: admitted ${res.admittedPerSecond}/s (${res.errorPct >= 0 ? "+" : ""}${res.errorPct}%), per process ${res.perProcess.join(" + ")}, wait p50 ${res.waitP50Ms} ms p99 ${res.waitP99Ms} ms`,
  );
}
const ceiling = await measure(0, 5000);
// The owner's own callers are admitted in-process; the other process goes over NATS request/reply.
const [ownerSide = 0, remoteSide = 0] = [...ceiling.perProcess].sort((a, b) => b - a);
log(
  `ceiling (no limit): ${ceiling.admittedPerSecond}/s (owner process in-process ${ownerSide}/s, other process over NATS ${remoteSide}/s), wait p50 ${ceiling.waitP50Ms} ms p99 ${ceiling.waitP99Ms} ms`,
);

// Kill the owner of the pool mid-run: the survivor must take the pool over and hold R again.
const killRate = 1000;
const killAtMs = 3000;
const killDurationMs = 10_000;
const pool = "bench-kill";
const workers = startPair(pool, killRate, killDurationMs);
const nc = await nats.connect("bench");
const kv = await new Kvm(nc).open(Buckets.pacer.name);
await new Promise((r) => setTimeout(r, 1500 + killAtMs));
const rec = (await kv.get(StateKeys.pacerPool(pool)))?.json<OwnerRecord>();
const victim = workers.find((w) => w.id === rec?.owner) ?? workers[0]!;
const survivor = workers.find((w) => w !== victim)!;
victim.proc.kill("SIGKILL");
await Promise.all(workers.map((w) => w.done));
const killBin = killAtMs / BIN_MS;
const endBin = killDurationMs / BIN_MS;
const perBinTarget = (killRate * BIN_MS) / 1000;
let recoveredBin = endBin;
for (let b = killBin; b < endBin; b++) {
  if ((survivor.bins.get(b) ?? 0) >= 0.9 * perBinTarget) {
    recoveredBin = b;
    break;
  }
}
const recoveryMs = (recoveredBin - killBin) * BIN_MS;
const afterFrom = recoveredBin + 1;
const afterSeconds = ((endBin - afterFrom) * BIN_MS) / 1000;
const afterRate = afterSeconds > 0 ? countBins([survivor], afterFrom, endBin) / afterSeconds : 0;
// The victim's last bins may not have been flushed before SIGKILL: measure "before" up to 300 ms ahead of it.
const beforeRate = countBins(workers, WARM_MS / BIN_MS, killBin - 3) / ((killAtMs - 300 - WARM_MS) / 1000);
const kill = {
  targetPerSecond: killRate,
  killed: victim.id,
  killedWasOwner: rec?.owner === victim.id,
  beforePerSecond: Math.round(beforeRate * 10) / 10,
  recoveryMs,
  afterPerSecond: Math.round(afterRate * 10) / 10,
  afterErrorPct: Math.round(((afterRate - killRate) / killRate) * 10_000) / 100,
};
log(
  `kill: owner ${kill.killed} SIGKILLed at ${killAtMs} ms; before ${kill.beforePerSecond}/s; survivor back at R after ${recoveryMs} ms; then ${kill.afterPerSecond}/s (${kill.afterErrorPct}%)`,
);
await nc.close();
await nats.cleanup();
const ok = rates.every((r) => Math.abs(r.errorPct) <= 1) && Math.abs(kill.afterErrorPct) <= 1;
log(
  JSON.stringify({
    bench: "pacer",
    design: "one-owner-per-pool",
    callers: CALLERS * 2,
    rates,
    ceiling,
    kill,
    ok,
  }),
);
