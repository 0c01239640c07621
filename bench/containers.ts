/**
 * bench:containers — attempt start on the local backend with a container per attempt, against the same attempts run
 * as plain processes in the same script (the baseline):
 *  - launch → harness running: from the dispatcher handing the attempt to the backend to the harness's first
 *    command (it writes the wall clock into its repository; host and containers share the clock), p50 / p99 / max;
 *  - memory per attempt while all of them run at once: the task processes' RSS, the harness containers' memory
 *    (cgroup usage, from the Docker API) and the container runtime's per-container shims;
 *  - what failed, if anything (the limits hit).
 * The harness is a command that records its start and sleeps BENCH_HOLD_S (default 90: on 2 cores the last of 50
 * attempts starts ~30 s after the first) so every attempt is running together when memory is sampled.
 * BENCH_ATTEMPTS (default 50) attempts of the shipped calc task, all at once. The task processes run from source,
 * as `evalfleet up` in a checkout runs them (each compiles itself through tsx at start: ~1 s of CPU here).
 * Needs a Docker API (test/helpers/docker.ts finds or starts one). Last line: one JSON object.
 */
import { readdir, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { LocalBackend } from "../actors/dispatcher/backends/local.js";
import type { JobRef } from "../actors/dispatcher/backends/types.js";
import { loadBenchSettings } from "../config/index.js";
import { silentLogger } from "../lib/log.js";
import { BlobNames } from "../protocol/subjects.js";
import { type ScriptedProvider, startScriptedProvider } from "../scripted-provider/index.js";
import { ATTEMPT_LABEL } from "../task/sandbox.js";
import { warmSandboxImage } from "../task/sandbox-select.js";
import { testRootfs, testRuntime } from "../test/helpers/docker.js";
import { attemptResults, startRig, waitFor } from "../test/integration/dispatcher-fixture.js";

const { bench, host } = loadBenchSettings("containers");
const N = bench.attempts;
const HOLD_S = bench.holdS;
const RUN_KEY = "sk-bench-containers-0123456789abcdef";

interface ModeFigures {
  sandbox: "container" | "process";
  attempts: number;
  started: number;
  launchToRunningMs: { p50: number; p99: number; max: number } | null;
  /** while every attempt ran at once */
  memoryPerAttemptMb: { task: number; harness: number; runtimeShim: number; total: number } | null;
  wallS: number;
  /** container mode: building (or finding) the harness image first, as `up` does before any attempt */
  warmImageS?: number;
  failures: string[];
}

function pct(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)]!;
}

/** RSS in MB of every process whose command line matches, and how many there are. */
async function rssOf(match: (cmd: string, ppid: number) => boolean): Promise<{ mb: number; n: number }> {
  let kb = 0;
  let n = 0;
  for (const d of await readdir("/proc").catch(() => [] as string[])) {
    if (!/^\d+$/.test(d)) continue;
    const cmd = (await readFile(`/proc/${d}/cmdline`, "utf8").catch(() => "")).replaceAll("\0", " ");
    const stat = await readFile(`/proc/${d}/stat`, "utf8").catch(() => "");
    const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1] ?? 0);
    if (!cmd || !match(cmd, ppid)) continue;
    const status = await readFile(`/proc/${d}/status`, "utf8").catch(() => "");
    kb += Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
    n++;
  }
  return { mb: kb / 1024, n };
}

async function runMode(sandbox: "container" | "process", provider: ScriptedProvider): Promise<ModeFigures> {
  const { runtime, dockerHost } = await testRuntime();
  const rootfs = await testRootfs();
  // As `up` does before any attempt: the harness image built (or found) once, not by the first attempts.
  const warm0 = Date.now();
  if (sandbox === "container")
    await warmSandboxImage(
      runtime,
      { ...host.inheritedEnv, DOCKER_HOST: dockerHost, EVALFLEET_BASE_ROOTFS: rootfs },
      silentLogger(),
    );
  const warmImageS = Math.round((Date.now() - warm0) / 100) / 10;
  const rig = await startRig([]);
  const launchedAt = new Map<string, number>();
  const key = (r: { runName: string; cellId: string; attempt: number }) => `${r.cellId}/${r.attempt}`;
  const work = join(rig.libDir, "work");
  const backend = new LocalBackend({
    inheritedEnv: { ...host.inheritedEnv, DOCKER_HOST: dockerHost, EVALFLEET_BASE_ROOTFS: rootfs },
    env: {
      ...rig.nats.env,
      EVALFLEET_GATEWAY_URL: provider.url,
      EVALFLEET_RUN_KEY: RUN_KEY,
      EVALFLEET_WORKDIR: work,
      EVALFLEET_GIT_MIRRORS: join(rig.libDir, "mirrors"),
      EVALFLEET_LOG_LEVEL: "warn",
    },
    sandbox,
    log: silentLogger(),
  });
  const launch = backend.launch.bind(backend);
  backend.launch = (refs: JobRef[]) => {
    const t = Date.now();
    for (const r of refs) launchedAt.set(key(r), t);
    return launch(refs);
  };
  const t0 = Date.now();
  const failures: string[] = [];
  let memory: ModeFigures["memoryPerAttemptMb"] = null;
  const run = `bench-${sandbox}`;
  try {
    await rig.dispatcher({ backend, extra: { retryDelaysMs: [1_000] } });
    await rig.submit({
      name: run,
      task_library_path: resolve("examples/tasks"),
      harnesses: [
        {
          name: "hold",
          adapter: "command",
          settings: { command: `date +%s%3N > started.txt; sleep ${HOLD_S}` },
        },
      ],
      models: [{ name: "gpt-5-mini", provider: "openai" }],
      tasks: ["sample-calc-add"],
      repeats: N,
      parallel_runs: N,
      timeout_seconds: HOLD_S + 300,
      budget_usd: 10,
    });
    // All running at once: each harness has written its start (it sleeps on after), so sample memory now.
    const started = async () => {
      let n = 0;
      for (const cell of await readdir(join(work, run)).catch(() => [] as string[]))
        for (const a of await readdir(join(work, run, cell)).catch(() => [] as string[]))
          if (
            (
              await readFile(join(work, run, cell, a, "harness", "repo", "started.txt"), "utf8").catch(
                () => "",
              )
            ).trim()
          )
            n++;
      return n;
    };
    await waitFor(
      "every harness running",
      async () => ((await started()) >= N ? true : undefined),
      // past the hold the first harnesses have ended: they can no longer all run at once
      HOLD_S * 1000,
    ).catch((err: unknown) => failures.push(`not all ${N} harnesses ran at once: ${(err as Error).message}`));
    const tasks = await rssOf((cmd, ppid) => ppid === process.pid && / task$/.test(cmd.trim()));
    const shims = await rssOf((cmd) => cmd.includes("containerd-shim"));
    let harnessMb = 0;
    let containers = 0;
    if (sandbox === "container") {
      // This run's harness containers only: the daemon may be running other people's too.
      const mine = (await runtime.list({ [ATTEMPT_LABEL]: true })).filter((c) =>
        (c.labels[ATTEMPT_LABEL] ?? "").startsWith(`${run}/`),
      );
      for (const c of mine) {
        const s = (await runtime.docker
          .getContainer(c.id)
          .stats({ stream: false })
          .catch(() => ({}))) as { memory_stats?: { usage?: number; stats?: { cache?: number } } };
        harnessMb += ((s.memory_stats?.usage ?? 0) - (s.memory_stats?.stats?.cache ?? 0)) / 1024 / 1024;
        containers++;
      }
    } else {
      const h = await rssOf((cmd) => cmd.includes("sleep") && !cmd.includes("node"));
      harnessMb = h.mb;
      containers = h.n;
    }
    const per = (mb: number) => Math.round((mb / Math.max(1, N)) * 10) / 10;
    memory = {
      task: per(tasks.mb),
      harness: per(harnessMb),
      runtimeShim: per(shims.mb),
      total: per(tasks.mb + harnessMb + shims.mb),
    };
    process.stdout.write(
      `  ${sandbox}: ${tasks.n} task processes, ${containers} harness ${sandbox === "container" ? "containers" : "processes"}, ${shims.n} runtime shims\n`,
    );
    const results = await waitFor(
      "every attempt's result",
      async () => {
        const r = await attemptResults(rig.client, run);
        return r.length >= N ? r : undefined;
      },
      HOLD_S * 1000 + 600_000,
    );
    const delays: number[] = [];
    for (const r of results) {
      if (r.status !== "PATCH_READY") {
        failures.push(`${r.cellId}#${r.attempt}: ${r.status} ${r.errorMessage ?? ""}`.slice(0, 300));
        continue;
      }
      // A small patch travels inline in the result; a big one is the attempt's blob.
      const patch =
        r.patch ??
        Buffer.from(
          (await rig.client.blobs.getBlob(BlobNames.attempt(run, r.cellId, r.attempt, "patch.diff"))) ?? [],
        ).toString("utf8");
      const at = Number(/\+(\d{13})/.exec(patch)?.[1]);
      const from = launchedAt.get(key({ runName: run, cellId: r.cellId, attempt: r.attempt }));
      if (Number.isFinite(at) && from !== undefined) delays.push(at - from);
    }
    delays.sort((a, b) => a - b);
    return {
      sandbox,
      attempts: N,
      started: delays.length,
      launchToRunningMs: delays.length
        ? { p50: pct(delays, 0.5), p99: pct(delays, 0.99), max: delays.at(-1)! }
        : null,
      memoryPerAttemptMb: memory,
      wallS: Math.round((Date.now() - t0) / 100) / 10,
      ...(sandbox === "container" ? { warmImageS } : {}),
      failures: failures.slice(0, 10),
    };
  } finally {
    await rig.close();
    await backend.close().catch(() => {});
  }
}

const provider = await startScriptedProvider({ keys: [RUN_KEY] });
try {
  process.stdout.write(`bench:containers — ${N} attempts at once, each holding ${HOLD_S} s\n`);
  const baseline = await runMode("process", provider);
  process.stdout.write(`${JSON.stringify(baseline)}\n`);
  const containers = await runMode("container", provider);
  process.stdout.write(`${JSON.stringify(containers)}\n`);
  const ratio = (a: number | undefined, b: number | undefined) =>
    a !== undefined && b ? Math.round((a / b) * 100) / 100 : null;
  const summary = {
    bench: "containers",
    attempts: N,
    container: containers,
    process: baseline,
    p50StartRatioContainerToProcess: ratio(
      containers.launchToRunningMs?.p50,
      baseline.launchToRunningMs?.p50,
    ),
    memoryRatioContainerToProcess: ratio(
      containers.memoryPerAttemptMb?.total,
      baseline.memoryPerAttemptMb?.total,
    ),
    aim: "container launch → harness running p50 ≤ 1500 ms",
    aimMet: (containers.launchToRunningMs?.p50 ?? Number.POSITIVE_INFINITY) <= 1_500,
  };
  process.stdout.write(`${JSON.stringify(summary)}\n`);
} finally {
  await provider.close();
}
