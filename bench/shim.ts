/**
 * `npm run bench:shim`: streaming calls at fixed rates (open loop) against the scripted provider directly and
 * through the shim, in the same run. The provider and the shim each run in their own process so the shim's CPU per
 * call is measured apart; the shim publishes its ledger to a real nats-server like in production.
 * Prints direct vs through-shim latency percentiles, the added p50 / p99, CPU per call; the last line is JSON.
 */
import { type ChildProcess, execFileSync, fork } from "node:child_process";
import { cpus, loadavg } from "node:os";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { Agent, request } from "undici";
import { loadBenchSettings } from "../config/index.js";

const SELF = fileURLToPath(import.meta.url);
const { bench, host } = loadBenchSettings("shim");
/**
 * Fixed rates with a short request, then a slower rate with a request the size of a coding agent's mid-session turn
 * (system prompt, tool definitions, a conversation with code and non-ASCII text): what reading a large request costs.
 */
const LOADS = [
  { rate: 500, requestKb: 0 },
  { rate: 2000, requestKb: 0 },
  { rate: 200, requestKb: bench.largeKb },
];
/** seconds per arm per rate, split into ROUNDS windows */
const DURATION_S = bench.seconds;
const WARMUP_S = 3;
/** direct / through-shim windows per rate */
const ROUNDS = bench.rounds;
/** A streaming Messages request of about `kb` KB (a one-line prompt for 0). */
function requestBody(kb: number): Buffer {
  const messages: unknown[] = [];
  const line = 'const naïve = résumé.map((x) => x * 2); // "quoted" \\ path\n';
  for (let turn = 0; JSON.stringify(messages).length < kb * 1000 - 12_000; turn++)
    messages.push(
      turn % 2 === 0
        ? {
            role: "user",
            content: [{ type: "tool_result", tool_use_id: `toolu_${turn}`, content: line.repeat(40) }],
          }
        : {
            role: "assistant",
            content: [
              { type: "tool_use", id: `toolu_${turn + 1}`, name: "bash", input: { command: "ls -la" } },
            ],
          },
    );
  messages.push({ role: "user", content: "Say something short." });
  return Buffer.from(
    JSON.stringify({
      model: "claude-sonnet-4-5",
      max_tokens: 256,
      stream: true,
      ...(kb > 0
        ? {
            system: [{ type: "text", text: "You are a coding agent. ".repeat(200) }],
            tools: Array.from({ length: 12 }, (_, i) => ({
              name: `tool_${i}`,
              description: "Runs a thing. ".repeat(30),
              input_schema: { type: "object", properties: { command: { type: "string" } } },
            })),
          }
        : {}),
      messages,
    }),
  );
}

interface Spin {
  seconds: number;
  gapsOver1Ms: number;
  gapsOver5Ms: number;
  maxGapMs: number;
  lostMs: number;
}

type Msg = { port?: number; cpu?: NodeJS.CpuUsage; loopP99Ms?: number; loopMaxMs?: number; spin?: Spin };

/**
 * What this machine does to a process when every CPU is busy: one clock-reading spinner per CPU, together. On a
 * quiet host the gaps are rare and short; a VM whose vCPUs the host takes away shows them here, and any latency
 * tail measured below includes them.
 */
async function machineStalls(): Promise<Spin & { spinners: number }> {
  const n = cpus().length;
  const spins = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<Spin>((resolve, reject) => {
          const proc = fork(SELF, ["--role", "spin"], {
            execArgv: ["--import", "tsx"],
            stdio: ["ignore", "inherit", "inherit", "ipc"],
          });
          proc.once("message", (m: Msg) =>
            m.spin ? resolve(m.spin) : reject(new Error("spinner said nothing")),
          );
          proc.once("exit", (code) => reject(new Error(`spinner exited ${code}`)));
        }),
    ),
  );
  const sum = (f: (x: Spin) => number) => spins.reduce((a, x) => a + f(x), 0);
  return {
    spinners: n,
    seconds: spins[0]?.seconds ?? 0,
    gapsOver1Ms: sum((x) => x.gapsOver1Ms),
    gapsOver5Ms: sum((x) => x.gapsOver5Ms),
    maxGapMs: r3(Math.max(...spins.map((x) => x.maxGapMs))),
    lostMs: r3(sum((x) => x.lostMs)),
  };
}

const LOOP_SAMPLE_MS = 5;

/** Answer the parent's "cpu" and "loop" questions, then tell it the port: every child role ends here. */
function ready(port: number): void {
  const send = (m: Msg) => process.send?.(m);
  // How late the event loop woke for a timer, less the sampling interval: how long it was held up.
  const loop = monitorEventLoopDelay({ resolution: LOOP_SAMPLE_MS });
  loop.enable();
  process.on("message", (m: string) => {
    if (m === "cpu") send({ cpu: process.cpuUsage() });
    if (m === "loop") {
      const less = (ns: number) => Math.max(0, ns / 1e6 - LOOP_SAMPLE_MS);
      send({ loopP99Ms: less(loop.percentile(99)), loopMaxMs: less(loop.max) });
      loop.reset();
    }
  });
  send({ port });
}

async function role(name: string): Promise<void> {
  // A clean exit on SIGTERM lets --cpu-prof write its profile.
  process.on("SIGTERM", () => process.exit(0));
  if (name === "spin") {
    // A busy loop that does nothing but read the clock: any gap between two reads is time this process was not
    // running (preempted by the kernel or the hypervisor). It allocates nothing, so no gap is its own GC.
    const ms = bench.spinMs;
    const t0 = performance.now();
    let last = t0;
    let over1 = 0;
    let over5 = 0;
    let lostMs = 0;
    let maxMs = 0;
    for (let now = t0; now - t0 < ms; now = performance.now()) {
      const gap = now - last;
      last = now;
      if (gap > 0.2) lostMs += gap;
      if (gap > 1) over1++;
      if (gap > 5) over5++;
      if (gap > maxMs) maxMs = gap;
    }
    process.send?.({
      spin: { seconds: ms / 1000, gapsOver1Ms: over1, gapsOver5Ms: over5, maxGapMs: maxMs, lostMs },
    });
    return;
  }
  if (name === "provider") {
    const { startScriptedProvider } = await import("../scripted-provider/index.js");
    const sp = await startScriptedProvider({
      scenario: { text: "A short streamed benchmark reply, in words." },
    });
    return ready(sp.port);
  }
  if (name === "bare") {
    // The floor for a Node proxy on this machine: the shim's HTTP stack (node:http in, an undici Pool out, bytes
    // passed on as they arrive) with nothing else. What the shim costs above this is metering.
    const { createServer } = await import("node:http");
    const { Pool } = await import("undici");
    const up = new Pool(bench.upstream ?? "", { connections: 256, keepAliveTimeout: 60_000 });
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.once("end", () => {
        const headers = { ...req.headers, host: undefined, connection: undefined };
        up.dispatch(
          { path: req.url ?? "/", method: "POST", headers, body: Buffer.concat(chunks) },
          {
            onRequestStart() {},
            onResponseStart(_c, status, h) {
              res.writeHead(status, { "content-type": String(h["content-type"] ?? "") });
            },
            onResponseData(_c, chunk) {
              res.write(chunk);
            },
            onResponseEnd() {
              res.end();
            },
            onResponseError() {
              res.destroy();
            },
          },
        );
      });
    });
    server.keepAliveTimeout = 65_000;
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
    return ready((server.address() as { port: number }).port);
  }
  const { connect } = await import("@nats-io/transport-node");
  const { natsConnectOptions } = await import("../plane/connect.js");
  const { natsFromEnv } = await import("../test/helpers/nats.js");
  const { startShim } = await import("../shim/index.js");
  // Async traces cost a captured stack per request; the ledger does not need them.
  const nc = await connect({
    ...natsConnectOptions(natsFromEnv()),
    noAsyncTraces: true,
  });
  const shim = await startShim({
    upstream: bench.upstream ?? "",
    run: "bench",
    cell: "cell",
    attempt: 1,
    providerKey: "bench-key-0123456789",
    budgetNanoUsd: 1_000_000n * 1_000_000_000n,
    nc,
  });
  ready(shim.port);
}

function child(
  name: string,
  env: Record<string, string>,
  all: ChildProcess[],
): Promise<{ proc: ChildProcess; port: number }> {
  const proc = fork(SELF, ["--role", name], {
    execArgv: [
      "--import",
      "tsx",
      ...(bench.prof === name ? ["--cpu-prof", "--cpu-prof-dir=/tmp/shim-prof"] : []),
      ...(name === "shim" ? bench.shimNodeArgs : []),
    ],
    env: { ...host.inheritedEnv, ...env },
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  all.push(proc);
  return new Promise((resolve, reject) => {
    proc.once("message", (m: Msg) => resolve({ proc, port: m.port ?? 0 }));
    proc.once("exit", (code) => reject(new Error(`${name} exited ${code}`)));
  });
}

function loopOf(proc: ChildProcess): Promise<{ p99: number; max: number }> {
  return new Promise((resolve) => {
    proc.once("message", (m: Msg) => resolve({ p99: m.loopP99Ms ?? 0, max: m.loopMaxMs ?? 0 }));
    proc.send("loop");
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
async function drive(agent: Agent, url: string, rate: number, seconds: number, body: Buffer): Promise<Phase> {
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
        inflight.push(one(agent, url, phase, body));
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

async function one(agent: Agent, url: string, phase: Phase, body: Buffer): Promise<void> {
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
      body,
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

/** Move a process and all its threads onto the given CPUs (Linux taskset); false when that is not possible. */
function pin(pid: number, cpuList: string): boolean {
  try {
    execFileSync("taskset", ["-a", "-pc", cpuList, String(pid)], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

interface Arm {
  name: "direct" | "bare" | "shim";
  url: string;
  /** the proxy process whose CPU and event loop are measured (none for direct) */
  proc?: ChildProcess;
}

interface ArmStats {
  all: Phase;
  /** p99 of each window, for the median across windows */
  windowP99s: number[];
  cpuUs: number;
  loopP99Ms: number[];
  loopMaxMs: number;
}

const median = (xs: number[]) => pct(xs, 50);

function summary(a: ArmStats) {
  const calls = a.all.latenciesMs.length + a.all.errors;
  return {
    p50: r3(pct(a.all.latenciesMs, 50)),
    p90: r3(pct(a.all.latenciesMs, 90)),
    p99: r3(pct(a.all.latenciesMs, 99)),
    p999: r3(pct(a.all.latenciesMs, 99.9)),
    /** median over windows of each window's p99: one stall of the machine moves one window, not the figure */
    p99Windowed: r3(median(a.windowP99s)),
    ttfbP50: r3(pct(a.all.ttfbMs, 50)),
    cpuUsPerCall: r3(a.cpuUs / Math.max(1, calls)),
    errors: a.all.errors,
    lateStarts: a.all.lateStarts,
    ...(a.loopP99Ms.length > 0
      ? { loopDelayP99Ms: r3(median(a.loopP99Ms)), loopDelayMaxMs: r3(a.loopMaxMs) }
      : {}),
  };
}

type Summary = ReturnType<typeof summary>;

function added(over: Summary, base: Summary) {
  return {
    p50: r3(over.p50 - base.p50),
    p99: r3(over.p99 - base.p99),
    p99Windowed: r3(over.p99Windowed - base.p99Windowed),
  };
}

async function main(): Promise<void> {
  // Pinned layout (BENCH_PIN=1): the load generator, the provider and nats-server share CPU 0; the shim and the bare
  // proxy get CPU 1, as a shim gets its task's own vCPU in production instead of competing with the provider.
  const pinned = bench.pin && cpus().length >= 2 && pin(process.pid, "0");
  const { startNats } = await import("../test/helpers/nats.js");
  const { ensureShimTopology } = await import("../test/integration/shim-fixture.js");
  const nats = await startNats();
  const children: ChildProcess[] = [];
  const stop = async () => {
    for (const c of children) c.kill("SIGTERM");
    await nats.cleanup();
  };
  // Interrupted: leave no nats-server or children behind.
  for (const sig of ["SIGINT", "SIGTERM"] as const)
    process.once(sig, () => void stop().finally(() => process.exit(130)));
  const agent = new Agent({ connections: 512, keepAliveTimeout: 30_000 });
  const results: Record<string, unknown>[] = [];
  const small = requestBody(0);
  let stalls: Awaited<ReturnType<typeof machineStalls>> | undefined;
  try {
    const nc = await nats.connect("bench");
    await ensureShimTopology(nc);
    await nc.close();
    const start = (name: string, env: Record<string, string>) => child(name, env, children);
    const provider = await start("provider", {});
    const providerUrl = `http://127.0.0.1:${provider.port}`;
    const shim = await start("shim", { ...nats.env, UPSTREAM: providerUrl });
    const bare = await start("bare", { UPSTREAM: providerUrl });
    if (pinned) for (const c of [shim, bare]) pin(c.proc.pid ?? 0, "1");
    const arms: Arm[] = [
      { name: "direct", url: providerUrl },
      { name: "bare", url: `http://127.0.0.1:${bare.port}`, proc: bare.proc },
      { name: "shim", url: `http://127.0.0.1:${shim.port}`, proc: shim.proc },
    ];
    // Warm up long enough for the JIT to settle in every process.
    for (const arm of arms) await drive(agent, arm.url, 1000, WARMUP_S, small);
    stalls = await machineStalls();
    process.stdout.write(
      `machine: ${stalls.spinners} spinners x ${stalls.seconds}s, all CPUs busy: ${stalls.gapsOver1Ms} gaps > 1 ms, ${stalls.gapsOver5Ms} > 5 ms, longest ${stalls.maxGapMs} ms, ${stalls.lostMs} ms lost in all\n`,
    );
    const idle0 = await cpuOf(shim.proc);
    await new Promise((r) => setTimeout(r, 1000));
    const idleUsPerS = usOf(idle0, await cpuOf(shim.proc));
    for (const { rate, requestKb } of LOADS) {
      const body = requestBody(requestKb);
      const stats = new Map<Arm["name"], ArmStats>();
      for (const arm of arms)
        stats.set(arm.name, {
          all: { latenciesMs: [], ttfbMs: [], errors: 0, lateStarts: 0 },
          windowP99s: [],
          cpuUs: 0,
          loopP99Ms: [],
          loopMaxMs: 0,
        });
      let providerUs = 0;
      let driverUs = 0;
      for (let round = 0; round < ROUNDS; round++) {
        // The arms take turns in short windows, in a rotating order, so a stall of the machine (this VM loses
        // several ms at a time when both vCPUs are busy) falls on every arm alike.
        for (let k = 0; k < arms.length; k++) {
          const arm = arms[(round + k) % arms.length]!;
          const st = stats.get(arm.name)!;
          const p0 = await cpuOf(provider.proc);
          const d0 = process.cpuUsage();
          const c0 = arm.proc ? await cpuOf(arm.proc) : undefined;
          if (arm.proc) await loopOf(arm.proc);
          const phase = await drive(agent, arm.url, rate, DURATION_S / ROUNDS, body);
          if (arm.proc && c0) {
            st.cpuUs += usOf(c0, await cpuOf(arm.proc));
            const loop = await loopOf(arm.proc);
            st.loopP99Ms.push(loop.p99);
            st.loopMaxMs = Math.max(st.loopMaxMs, loop.max);
          }
          if (arm.name === "direct") {
            driverUs += usOf(d0, process.cpuUsage());
            providerUs += usOf(p0, await cpuOf(provider.proc));
          }
          st.windowP99s.push(pct(phase.latenciesMs, 99));
          merge(st.all, phase);
        }
      }
      const direct = summary(stats.get("direct")!);
      const viaBare = summary(stats.get("bare")!);
      const viaShim = summary(stats.get("shim")!);
      const directCalls = Math.max(1, stats.get("direct")!.all.latenciesMs.length + direct.errors);
      const row = {
        rate,
        requestBytes: body.length,
        calls: stats.get("shim")!.all.latenciesMs.length + viaShim.errors,
        direct,
        bare: viaBare,
        shim: viaShim,
        /** what the shim adds to a call: the figure */
        added: added(viaShim, direct),
        /** what any Node proxy hop adds here: node:http in, undici out, bytes passed on, nothing else */
        bareAdded: added(viaBare, direct),
        /** what metering adds on top of that hop */
        meteringAdded: added(viaShim, viaBare),
        providerCpuUsPerCall: r3(providerUs / directCalls),
        driverCpuUsPerCall: r3(driverUs / directCalls),
        shimIdleCpuUsPerS: r3(idleUsPerS),
      };
      results.push(row);
      const f = (a: { p50: number; p99: number; p99Windowed: number }) =>
        `p50 ${a.p50} p99 ${a.p99} (windowed ${a.p99Windowed})`;
      process.stdout.write(
        `${rate}/s x ${DURATION_S}s per arm, ${Math.round(body.length / 1000)} KB requests | direct ${f(direct)} | shim ${f(viaShim)} | added ${f(row.added)} | bare proxy added ${f(row.bareAdded)} | metering added ${f(row.meteringAdded)} | CPU/call shim ${viaShim.cpuUsPerCall} us, bare ${viaBare.cpuUsPerCall} us, provider ${row.providerCpuUsPerCall} us, driver ${row.driverCpuUsPerCall} us | loop delay p99 shim ${viaShim.loopDelayP99Ms} bare ${viaBare.loopDelayP99Ms} ms | errors ${direct.errors}/${viaBare.errors}/${viaShim.errors}\n`,
      );
    }
  } finally {
    await agent.close();
    await stop();
  }
  const at2000 = results.find((r) => r.rate === 2000 && r.requestBytes === small.length) as
    | { added: { p99: number } }
    | undefined;
  process.stdout.write(
    `${JSON.stringify({ bench: "shim", durationS: DURATION_S, rounds: ROUNDS, pinned, cpus: cpus().length, loadavg1m: r3(loadavg()[0] ?? 0), machineStalls: stalls, results, addedP99At2000Ms: at2000?.added.p99 ?? null, aimMet: at2000 ? at2000.added.p99 < 1 : false })}\n`,
  );
}

const roleIdx = process.argv.indexOf("--role");
if (roleIdx >= 0) await role(process.argv[roleIdx + 1] ?? "");
else await main();
