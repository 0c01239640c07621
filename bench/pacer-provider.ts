/**
 * 200 simulated agents against the scripted provider with RPM / input-TPM / output-TPM limits, through a gateway
 * replica, twice: paced by the fleet pacer (two pacer clients on one nats-server, as two task hosts would be; the
 * limits are not configured, they are discovered from the provider's headers), then with retry-on-429 only. Prints
 * the 429s that reached the agents, the provider's served input tokens per minute against its limit, and call
 * latency. Last line one JSON object. Run: `npx tsx bench/pacer-provider.ts`.
 */
import { performance } from "node:perf_hooks";
import { Agent, request } from "undici";
import { loadBenchSettings } from "../config/index.js";
import { startGateway } from "../gateway/server.js";
import { FleetPacer } from "../pacer/fleet-pacer.js";
import type { Admission, Pacer } from "../protocol/pacer.js";
import { anthropicJsonResult } from "../providers/anthropic.js";
import { approxTokens } from "../providers/types.js";
import { startScriptedProvider } from "../scripted-provider/index.js";
import { openDb } from "../store/db.js";
import { createRunKey } from "../store/keys.js";
import { migrate } from "../store/migrations.js";
import { startNats } from "../test/helpers/nats.js";

const { bench } = loadBenchSettings("pacer-provider");
const AGENTS = bench.agents;
const WARM_MS = bench.warmMs;
const MEASURE_MS = bench.measureMs;
const LIMITS = { rpm: 6000, inputTpm: 3_000_000, outputTpm: 600_000 };
const INPUT_TOKENS = 1000; // per call: the input-TPM limit binds at 50 calls/s
const MAX_TOKENS = 200;
const UPSTREAM_KEY = "sk-bench-upstream";
const log = (s: string) => process.stdout.write(`${s}\n`);

interface ModeResult {
  mode: "pacer" | "retry-on-429";
  agentCalls: number;
  agent429s: number;
  provider429s: number;
  servedInputTokensPerMinute: number;
  inputLimitPerMinute: number;
  utilizationPct: number;
  outputTokensPerMinute: number;
  callP50Ms: number;
  callP99Ms: number;
  /** from the agent's first ask (pacer wait, 429s and retries included) to its answer */
  answerP50Ms: number;
  answerP99Ms: number;
}

async function runMode(mode: ModeResult["mode"]): Promise<ModeResult> {
  const provider = await startScriptedProvider({
    keys: [UPSTREAM_KEY],
    limits: LIMITS,
    scenario: { text: "y".repeat(400), firstByteDelayMs: 40 },
  });
  const db = await openDb(); // embedded PGlite, in memory
  await migrate(db);
  const nats = mode === "pacer" ? await startNats() : undefined;
  const pacers: Pacer[] = [];
  if (nats) {
    // The pool's limits from configuration (the operator knows the key's tier), paced at 98% so the provider's
    // bucket keeps a little headroom against estimate error and arrival jitter; the headers keep them honest.
    const pools = {
      sonnet: {
        limits: {
          requestsPerMinute: LIMITS.rpm,
          inputTokensPerMinute: LIMITS.inputTpm,
          outputTokensPerMinute: LIMITS.outputTpm,
        },
        utilization: 0.98,
      },
    };
    for (const name of ["host-a", "host-b"])
      pacers.push(await FleetPacer.open({ nc: await nats.connect(name), pools }));
  }
  const gw = await startGateway({
    db: db,
    aliases: {
      sonnet: {
        upstream: { provider: "anthropic", baseUrl: provider.url, apiKey: UPSTREAM_KEY },
        model: "claude-sonnet-4-5",
      },
    },
    ...(pacers[0] ? { pacer: pacers[0] } : {}),
  });
  const key = await createRunKey(db, `bench-${mode}`);
  const agent = new Agent({ connections: AGENTS });
  const body = JSON.stringify({
    model: "sonnet",
    max_tokens: MAX_TOKENS,
    messages: [{ role: "user", content: "z".repeat(INPUT_TOKENS * 4 - 80) }],
  });
  const inputEstimate = approxTokens(Buffer.byteLength(body));
  await drain(provider.url, body);
  const provider429sBefore = provider.calls().filter((c) => c.status === 429).length;
  let agentCalls = 0;
  let agent429s = 0;
  const latencies: number[] = [];
  const answers: number[] = [];
  // The provider's bill is read at two fixed instants; agents stop asking at the second one.
  let billAtWarm = provider.bill().total;
  let billAtEnd = billAtWarm;
  let warmDone = false;
  const warmTimer = setTimeout(() => {
    billAtWarm = provider.bill().total;
    warmDone = true;
  }, WARM_MS);
  const stop = new AbortController();
  const endTimer = setTimeout(() => {
    billAtEnd = provider.bill().total;
    stop.abort();
  }, WARM_MS + MEASURE_MS);

  await Promise.all(
    Array.from({ length: AGENTS }, async (_, i) => {
      const pacer = pacers[i % Math.max(1, pacers.length)];
      let firstTryMs: number | undefined;
      while (!stop.signal.aborted) {
        firstTryMs ??= performance.now();
        let admission: Admission | undefined;
        try {
          admission = pacer
            ? await pacer.admit(
                { pool: "sonnet", inputTokens: inputEstimate, outputTokens: MAX_TOKENS },
                stop.signal,
              )
            : undefined;
        } catch {
          break; // the measurement is over
        }
        if (stop.signal.aborted) {
          admission?.refund();
          break;
        }
        const t0 = performance.now();
        const res = await request(`${gw.url}/v1/messages`, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            "x-api-key": key,
            "anthropic-version": "2023-06-01",
          },
          body,
          dispatcher: agent,
        });
        const text = await res.body.text();
        if (res.statusCode === 429) {
          // What a harness would see without a shim in front: count it, wait as told, try again.
          agent429s++;
          admission?.refund();
          const retryAfterS = Number(res.headers["retry-after"] ?? 1);
          await new Promise((r) => setTimeout(r, retryAfterS * 1000).unref());
          continue;
        }
        if (res.statusCode !== 200) throw new Error(`unexpected ${res.statusCode}: ${text}`);
        const usage = anthropicJsonResult(text).usage;
        // As the shim settles: input excluding cache reads, cache reads apart (weighted by the pool).
        admission?.settle({ ...usage, inputTokens: usage.inputTokens - usage.cacheReadTokens });
        agentCalls++;
        if (warmDone) {
          latencies.push(performance.now() - t0);
          answers.push(performance.now() - firstTryMs);
        }
        firstTryMs = undefined;
      }
    }),
  );
  clearTimeout(warmTimer);
  clearTimeout(endTimer);
  const minutes = MEASURE_MS / 60_000;
  const served = (billAtEnd.inputTokens - billAtWarm.inputTokens) / minutes;
  latencies.sort((a, b) => a - b);
  answers.sort((a, b) => a - b);
  const at = (xs: number[], p: number) =>
    Math.round(xs[Math.min(xs.length - 1, Math.floor(xs.length * p))] ?? 0);
  const pct = (p: number) => at(latencies, p);
  const result: ModeResult = {
    mode,
    agentCalls,
    agent429s,
    provider429s: provider.calls().filter((c) => c.status === 429).length - provider429sBefore,
    servedInputTokensPerMinute: Math.round(served),
    inputLimitPerMinute: LIMITS.inputTpm,
    utilizationPct: Math.round((served / LIMITS.inputTpm) * 1000) / 10,
    outputTokensPerMinute: Math.round((billAtEnd.outputTokens - billAtWarm.outputTokens) / minutes),
    callP50Ms: pct(0.5),
    callP99Ms: pct(0.99),
    answerP50Ms: at(answers, 0.5),
    answerP99Ms: at(answers, 0.99),
  };
  await agent.close();
  await gw.close();
  for (const p of pacers) await p.close();
  await nats?.cleanup();
  await provider.close();
  await db.close();
  return result;
}

/**
 * Empty the provider's buckets first (they start a minute full): the comparison is about a key in steady use at
 * its limit, where a client without a pacer can only learn the limit from 429s.
 */
async function drain(url: string, body: string): Promise<void> {
  const agent = new Agent({ connections: 100 });
  let limited = false;
  await Promise.all(
    Array.from({ length: 100 }, async () => {
      while (!limited) {
        const r = await request(`${url}/v1/messages`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": UPSTREAM_KEY },
          body: body.replace('"sonnet"', '"claude-sonnet-4-5"'),
          dispatcher: agent,
        });
        await r.body.dump();
        if (r.statusCode === 429) limited = true;
      }
    }),
  );
  await agent.close();
}

const results: ModeResult[] = [];
for (const mode of ["pacer", "retry-on-429"] as const) {
  const r = await runMode(mode);
  results.push(r);
  log(
    `${mode.padEnd(12)} ${AGENTS} agents: ${r.agentCalls} calls, 429s seen by agents ${r.agent429s}, served ${r.servedInputTokensPerMinute} input tokens/min of ${r.inputLimitPerMinute} (${r.utilizationPct}%), call p50 ${r.callP50Ms} ms p99 ${r.callP99Ms} ms, answer (waits and retries included) p50 ${r.answerP50Ms} ms p99 ${r.answerP99Ms} ms`,
  );
}
const paced = results[0]!;
log(
  JSON.stringify({
    bench: "pacer-provider",
    agents: AGENTS,
    limits: LIMITS,
    results,
    ok: paced.agent429s === 0 && paced.utilizationPct >= 95,
  }),
);
