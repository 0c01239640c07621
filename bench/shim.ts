/**
 * `npm run bench:shim`: streaming calls at fixed rates (open loop) against the scripted provider directly and
 * through the shim, in the same run. The provider and the shim each run in their own process so the shim's CPU per
 * call is measured apart; the shim publishes its ledger to a real nats-server like in production.
 * Prints direct vs through-shim latency percentiles, the added p50 / p99, CPU per call; the last line is JSON.
 */
import { type ChildProcess, fork } from "node:child_process";
import { cpus, loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { Agent, request } from "undici";

const SELF = fileURLToPath(import.meta.url);
const RATES = [500, 2000];
const DURATION_S = Number(process.env.BENCH_SECONDS ?? "5");
const WARMUP_S = 3;
/** direct / through-shim windows per rate */
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? "5");
const BODY = JSON.stringify({
  model: "claude-sonnet-4-5",
  max_tokens: 256,
  stream: true,
  messages: [{ role: "user", content: "Say something short." }],
});

type Msg = { port?: number; cpu?: NodeJS.CpuUsage };

async function role(name: string): Promise<void> {
  const send = (m: Msg) => process.send?.(m);
  // A clean exit on SIGTERM lets --cpu-prof write its profile.
  process.on("SIGTERM", () => process.exit(0));
  if (name === "provider") {
    const { startScriptedProvider } = await import("../scripts/scripted-provider/index.js");
    const sp = await startScriptedProvider({
      scenario: { text: "A short streamed benchmark reply, in words." },
    });
    process.on("message", (m: string) => {
      if (m === "cpu") send({ cpu: process.cpuUsage() });
    });
    send({ port: sp.port });
    return;
  }
  const { connect } = await import("@nats-io/transport-node");
  const { startShim } = await import("../shim/proxy/index.js");
  // Async traces cost a captured stack per request; the ledger does not need them.
  const nc = await connect({ servers: process.env.NATS_URL ?? "", noAsyncTraces: true });
  const shim = await startShim({
    upstream: process.env.UPSTREAM ?? "",
    run: "bench",
    cell: "cell",
    attempt: 1,
    providerKey: "bench-key-0123456789",
    budgetNanoUsd: 1_000_000n * 1_000_000_000n,
    nc,
  });
  process.on("message", (m: string) => {
    if (m === "cpu") send({ cpu: process.cpuUsage() });
  });
  send({ port: shim.port });
}

function child(name: string, env: Record<string, string>): Promise<{ proc: ChildProcess; port: number }> {
  const proc = fork(SELF, ["--role", name], {
    execArgv: [
      "--import",
      "tsx",
      ...(process.env.BENCH_PROF === name ? ["--cpu-prof", "--cpu-prof-dir=/tmp/shim-prof"] : []),
      ...(name === "shim" && process.env.BENCH_SHIM_NODE_ARGS
        ? process.env.BENCH_SHIM_NODE_ARGS.split(" ")
        : []),
    ],
    env: { ...process.env, ...env },
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  return new Promise((resolve, reject) => {
    proc.once("message", (m: Msg) => resolve({ proc, port: m.port ?? 0 }));
    proc.once("exit", (code) => reject(new Error(`${name} exited ${code}`)));
  });
}

function cpuOf(proc: ChildProcess): Promise<NodeJS.CpuUsage> {
  return new Promise((resolve) => {
    proc.once("message", (m: Msg) => resolve(m.cpu ?? { user: 0, system: 0 }));
    proc.send("cpu");
  });
}

interface Phase {
  latenciesMs: number[];
  ttfbMs: number[];
  errors: number;
  lateStarts: number;
}

/** Open loop: call i starts at i/rate seconds whether or not earlier calls are done. */
async function drive(agent: Agent, url: string, rate: number, seconds: number): Promise<Phase> {
  const total = Math.round(rate * seconds);
  const phase: Phase = { latenciesMs: [], ttfbMs: [], errors: 0, lateStarts: 0 };
  const t0 = performance.now();
  const inflight: Promise<void>[] = [];
  let i = 0;
  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = performance.now();
      while (i < total && t0 + (i * 1000) / rate <= now) {
        if (now - (t0 + (i * 1000) / rate) > 5) phase.lateStarts++;
        inflight.push(one(agent, url, phase));
        i++;
      }
      if (i >= total) resolve();
      else setTimeout(tick, 1);
    };
    tick();
  });
  await Promise.all(inflight);
  return phase;
}

async function one(agent: Agent, url: string, phase: Phase): Promise<void> {
  const start = performance.now();
  try {
    const res = await request(`${url}/v1/messages`, {
      method: "POST",
      dispatcher: agent,
      headers: {
        "content-type": "application/json",
        "x-api-key": "dummy",
        "anthropic-version": "2023-06-01",
      },
      body: BODY,
    });
    let first = true;
    for await (const _ of res.body) {
      if (first) {
        phase.ttfbMs.push(performance.now() - start);
        first = false;
      }
    }
    if (res.statusCode !== 200) phase.errors++;
    else phase.latenciesMs.push(performance.now() - start);
  } catch {
    phase.errors++;
  }
}

function merge(into: Phase, p: Phase): void {
  for (const x of p.latenciesMs) into.latenciesMs.push(x);
  for (const x of p.ttfbMs) into.ttfbMs.push(x);
  into.errors += p.errors;
  into.lateStarts += p.lateStarts;
}

function pct(xs: number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
}

const r3 = (x: number) => Math.round(x * 1000) / 1000;
const usOf = (a: NodeJS.CpuUsage, b: NodeJS.CpuUsage) => b.user - a.user + (b.system - a.system);

async function main(): Promise<void> {
  const { startNats } = await import("../test/helpers/nats.js");
  const { ensureShimTopology } = await import("../test/integration/shim-fixture.js");
  const nats = await startNats();
  const nc = await nats.connect("bench");
  await ensureShimTopology(nc);
  const provider = await child("provider", {});
  const providerUrl = `http://127.0.0.1:${provider.port}`;
  const shim = await child("shim", { NATS_URL: nats.url, UPSTREAM: providerUrl });
  const shimUrl = `http://127.0.0.1:${shim.port}`;
  const agent = new Agent({ connections: 512, keepAliveTimeout: 30_000 });
  const results: Record<string, unknown>[] = [];
  // Interrupted: leave no nats-server or children behind.
  for (const sig of ["SIGINT", "SIGTERM"] as const) {
    process.once(sig, () => {
      shim.proc.kill("SIGTERM");
      provider.proc.kill("SIGTERM");
      void nats.cleanup().finally(() => process.exit(130));
    });
  }
  try {
    // Warm up long enough for the JIT to settle in every process.
    await drive(agent, providerUrl, 1000, WARMUP_S);
    await drive(agent, shimUrl, 1000, WARMUP_S);
    const idle0 = await cpuOf(shim.proc);
    await new Promise((r) => setTimeout(r, 1000));
    const idleUsPerS = usOf(idle0, await cpuOf(shim.proc));
    for (const rate of RATES) {
      // Direct and through-shim windows alternate, so load from anything else on the machine falls on both alike.
      const direct: Phase = { latenciesMs: [], ttfbMs: [], errors: 0, lateStarts: 0 };
      const via: Phase = { latenciesMs: [], ttfbMs: [], errors: 0, lateStarts: 0 };
      let providerUs = 0;
      let cpuUs = 0;
      let driverUs = 0;
      for (let round = 0; round < ROUNDS; round++) {
        const p0 = await cpuOf(provider.proc);
        const d0 = process.cpuUsage();
        merge(direct, await drive(agent, providerUrl, rate, DURATION_S / ROUNDS));
        driverUs += usOf(d0, process.cpuUsage());
        providerUs += usOf(p0, await cpuOf(provider.proc));
        const cpu0 = await cpuOf(shim.proc);
        merge(via, await drive(agent, shimUrl, rate, DURATION_S / ROUNDS));
        cpuUs += usOf(cpu0, await cpuOf(shim.proc));
      }
      const calls = via.latenciesMs.length + via.errors;
      const directCalls = Math.max(1, direct.latenciesMs.length + direct.errors);
      const providerCpuUsPerCall = r3(providerUs / directCalls);
      const row = {
        rate,
        calls,
        direct: {
          p50: r3(pct(direct.latenciesMs, 50)),
          p90: r3(pct(direct.latenciesMs, 90)),
          p99: r3(pct(direct.latenciesMs, 99)),
          p999: r3(pct(direct.latenciesMs, 99.9)),
          errors: direct.errors,
        },
        shim: {
          p50: r3(pct(via.latenciesMs, 50)),
          p90: r3(pct(via.latenciesMs, 90)),
          p99: r3(pct(via.latenciesMs, 99)),
          p999: r3(pct(via.latenciesMs, 99.9)),
          errors: via.errors,
        },
        ttfb: { directP50: r3(pct(direct.ttfbMs, 50)), shimP50: r3(pct(via.ttfbMs, 50)) },
        addedP50Ms: r3(pct(via.latenciesMs, 50) - pct(direct.latenciesMs, 50)),
        addedP99Ms: r3(pct(via.latenciesMs, 99) - pct(direct.latenciesMs, 99)),
        shimCpuUsPerCall: r3(cpuUs / Math.max(1, calls)),
        providerCpuUsPerCall,
        driverCpuUsPerCall: r3(driverUs / directCalls),
        shimIdleCpuUsPerS: r3(idleUsPerS),
        lateStarts: { direct: direct.lateStarts, shim: via.lateStarts },
      };
      results.push(row);
      process.stdout.write(
        `${rate}/s x ${DURATION_S}s  direct p50 ${row.direct.p50} p99 ${row.direct.p99} ms | shim p50 ${row.shim.p50} p99 ${row.shim.p99} ms | added p50 ${row.addedP50Ms} p99 ${row.addedP99Ms} ms | CPU/call shim ${row.shimCpuUsPerCall} us, provider ${row.providerCpuUsPerCall} us, driver ${row.driverCpuUsPerCall} us | errors ${row.direct.errors}/${row.shim.errors}\n`,
      );
    }
  } finally {
    await agent.close();
    shim.proc.kill("SIGTERM");
    provider.proc.kill("SIGTERM");
    await nats.cleanup();
  }
  const at2000 = results.find((r) => r.rate === 2000) as { addedP99Ms: number } | undefined;
  process.stdout.write(
    `${JSON.stringify({ bench: "shim", durationS: DURATION_S, cpus: cpus().length, loadavg1m: r3(loadavg()[0] ?? 0), results, addedP99At2000Ms: at2000?.addedP99Ms ?? null, aimMet: at2000 ? at2000.addedP99Ms < 1 : false })}\n`,
  );
}

const roleIdx = process.argv.indexOf("--role");
if (roleIdx >= 0) await role(process.argv[roleIdx + 1] ?? "");
else await main();
