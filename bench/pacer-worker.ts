/**
 * One bench / test process: `callers` loops on one pool through a FleetPacer, admit then settle at once. Streams a
 * line per bin of admissions (so a killed worker's count up to its death is known) and, at the end, its waits.
 * argv[2]: JSON WorkerArgs.
 */

import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";
import { connect, credsAuthenticator } from "@nats-io/transport-node";
import { FleetPacer } from "../pacer/fleet-pacer.js";

export interface WorkerArgs {
  id: string;
  natsUrl: string;
  /** the plane user's `.creds` file */
  natsCreds: string;
  pool: string;
  /** admissions per second for the pool; 0 = no limit */
  ratePerSecond: number;
  burstMs: number;
  callers: number;
  /** wall-clock start and end of the run */
  startWallMs: number;
  endWallMs: number;
  binMs: number;
}

const args = JSON.parse(process.argv[2] ?? "{}") as WorkerArgs;
const nc = await connect({
  servers: args.natsUrl,
  authenticator: credsAuthenticator(readFileSync(args.natsCreds)),
  name: args.id,
  maxReconnectAttempts: -1,
});
const pacer = await FleetPacer.open({
  nc,
  id: args.id,
  pools: {
    [args.pool]: {
      limits: args.ratePerSecond > 0 ? { requestsPerMinute: args.ratePerSecond * 60 } : {},
      burstMs: args.burstMs,
    },
  },
});
const bins = new Map<number, number>();
const waitsMs: number[] = [];
const usage = { inputTokens: 0, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0 };

const flushed = new Set<number>();
const emit = (final: boolean) => {
  const current = Math.floor((Date.now() - args.startWallMs) / args.binMs);
  for (const [bin, n] of bins) {
    if (!final && bin >= current) continue;
    if (flushed.has(bin)) continue;
    flushed.add(bin);
    process.stdout.write(
      `${JSON.stringify({ id: args.id, bin, n, owner: pacer.ownedPools().length > 0 })}\n`,
    );
  }
};
const flusher = setInterval(() => emit(false), args.binMs);

await new Promise((r) => setTimeout(r, Math.max(0, args.startWallMs - Date.now())));
await Promise.all(
  Array.from({ length: args.callers }, async () => {
    while (Date.now() < args.endWallMs) {
      const t0 = performance.now();
      const a = await pacer.admit({ pool: args.pool, inputTokens: 0, outputTokens: 0 });
      const now = Date.now();
      if (now >= args.endWallMs) {
        a.refund();
        break;
      }
      waitsMs.push(performance.now() - t0);
      const bin = Math.floor((now - args.startWallMs) / args.binMs);
      bins.set(bin, (bins.get(bin) ?? 0) + 1);
      a.settle(usage);
    }
  }),
);
clearInterval(flusher);
emit(true);
// Waits as a compact histogram: 0.01 ms resolution below 10 ms, 1 ms above.
const hist: Record<string, number> = {};
for (const w of waitsMs) {
  const k = w < 10 ? (Math.round(w * 100) / 100).toFixed(2) : String(Math.round(w));
  hist[k] = (hist[k] ?? 0) + 1;
}
process.stdout.write(`${JSON.stringify({ id: args.id, done: true, waits: hist })}\n`);
await pacer.close();
await nc.close();
