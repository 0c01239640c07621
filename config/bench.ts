import { ErrorCode, formatIssues, ValidationError } from "../protocol/errors.js";
import { hostGroup, LOG_LEVELS } from "./common.js";
import { type GroupsOut, loadGroups } from "./load.js";
import {
  type AnyGroup,
  boolText,
  defineGroup,
  enumText,
  type Group,
  intText,
  optionalText,
  type Settings,
  SettingsError,
  setting,
  type ValuesOf,
} from "./setting.js";

/**
 * The benchmarks' knobs (`npm run bench:*`, bench/*.ts): one group per bench, read once at its start by
 * loadBenchSettings, like a role's settings. No shipped process reads them, so they belong to no role; the
 * configuration docs list them apart.
 */

const count = (env: string, doc: string, def: string, max = 1_000_000) =>
  setting({ env, doc, schema: intText(0, max), default: def });

/** BENCH_CALLS, which bench:scale and bench:plane read alike. */
const meteredCalls = count(
  "BENCH_CALLS",
  "metered calls per attempt through a real shim (0: synthetic usage)",
  "0",
  1000,
);

/** A group whose values are used as parsed. */
function knobs<S extends Settings>(name: string, doc: string, settings: S): Group<S, ValuesOf<S>> {
  return defineGroup({ name, doc, settings, compile: (v) => v });
}

const scale = defineGroup({
  name: "bench-scale",
  doc: "`npm run bench:scale`: attempts in flight at once on the sim backend.",
  settings: {
    attempts: count("BENCH_ATTEMPTS", "attempts in flight at once", "20000"),
    thinkS: count("BENCH_THINK_S", "how long each attempt lives, seconds (±15 %)", "40", 3600),
    calls: meteredCalls,
    deadlineS: count("BENCH_DEADLINE_S", "the bench stops by itself after this many seconds", "540", 86_400),
    logLevel: setting({
      env: "BENCH_LOG_LEVEL",
      doc: "the in-process actors' log level on stderr (what went wrong, e.g. warn)",
      schema: enumText(LOG_LEVELS),
      default: "silent",
    }),
    workers: setting({
      env: "BENCH_WORKERS",
      doc: "worker processes hosting the real shims (with BENCH_CALLS > 0)",
      schema: intText(1, 1000).optional(),
      defaultDoc: "one per 2,500 attempts",
    }),
  },
  compile: (v) => ({ ...v, workers: v.workers ?? Math.max(1, Math.ceil(v.attempts / 2_500)) }),
});

const plane = knobs(
  "bench-plane",
  "`npm run bench:plane`: a 20,000-cell run end to end on the sim backend.",
  {
    calls: meteredCalls,
    repeats: count("BENCH_REPEATS", "repeats of 1,000 tasks × 5 harnesses × 2 models", "2", 100),
    parallel: count("BENCH_PARALLEL", "attempts the sim backend runs at once", "2000"),
    timeoutS: count("BENCH_TIMEOUT_S", "the bench gives up after this many seconds", "540", 86_400),
  },
);

const shim = defineGroup({
  name: "bench-shim",
  doc: "`npm run bench:shim`: streaming calls direct and through the shim, in processes of their own.",
  settings: {
    largeKb: count("BENCH_LARGE_KB", "size of the large request, KB", "150", 100_000),
    seconds: count("BENCH_SECONDS", "seconds per arm per rate", "10", 3600),
    rounds: count("BENCH_ROUNDS", "direct / through-shim windows per rate", "10", 1000),
    pin: setting({
      env: "BENCH_PIN",
      doc: "pin the load generator, provider and nats-server to CPU 0, the shim to CPU 1",
      schema: boolText,
      default: "0",
    }),
    prof: setting({
      env: "BENCH_PROF",
      doc: "the child process (`shim`, `bare`, `provider`) to run with --cpu-prof into /tmp/shim-prof",
      schema: optionalText,
    }),
    shimNodeArgs: setting({
      env: "BENCH_SHIM_NODE_ARGS",
      doc: "extra node arguments for the shim process, space-separated",
      schema: optionalText,
    }),
    spinMs: count(
      "SPIN_MS",
      "(set by the bench for its child) how long the preemption probe spins, ms",
      "3000",
    ),
    upstream: setting({
      env: "UPSTREAM",
      doc: "(set by the bench for its child) where the shim or the bare proxy forwards",
      schema: optionalText,
    }),
  },
  compile: (v) => ({ ...v, shimNodeArgs: v.shimNodeArgs?.split(" ").filter(Boolean) ?? [] }),
});

const pacer = knobs(
  "bench-pacer",
  "`npm run bench:pacer`: two processes admitting through the fleet pacer.",
  { callers: count("PACER_BENCH_CALLERS", "callers per process", "50", 100_000) },
);

const pacerProvider = knobs(
  "bench-pacer-provider",
  "`npm run bench:pacer-provider`: simulated agents against a rate-limited provider.",
  {
    agents: count("BENCH_AGENTS", "simulated agents", "200", 100_000),
    warmMs: count("BENCH_WARM_MS", "warm-up before measuring, ms", "5000", 3_600_000),
    measureMs: count("BENCH_MEASURE_MS", "measured window, ms", "20000", 3_600_000),
  },
);

const containers = knobs(
  "bench-containers",
  "`npm run bench:containers`: attempt start with a container per attempt against plain processes.",
  {
    attempts: count("BENCH_ATTEMPTS", "attempts of the shipped calc task, all at once", "50", 10_000),
    holdS: count("BENCH_HOLD_S", "how long each harness holds, seconds", "90", 3600),
  },
);

const simWorker = knobs("bench-sim-worker", "A sim worker process of bench:scale (bench/sim-workers.ts).", {
  options: setting({
    env: "EF_SIM_WORKER",
    doc: "(set by bench:scale for its workers) the worker's options, JSON",
    schema: optionalText,
  }),
});

export const BENCH_GROUPS = {
  scale,
  plane,
  shim,
  pacer,
  "pacer-provider": pacerProvider,
  containers,
  "sim-worker": simWorker,
} satisfies Record<string, AnyGroup>;

export type BenchName = keyof typeof BENCH_GROUPS;
type BenchGroups<B extends BenchName> = { bench: (typeof BENCH_GROUPS)[B]; host: typeof hostGroup };
export type BenchSettings<B extends BenchName> = GroupsOut<BenchGroups<B>>;

/**
 * A bench's knobs and the environment its children inherit, from `env`; a wrong value throws a ValidationError
 * that names each variable and what is wrong with it.
 */
export function loadBenchGroups<B extends BenchName>(
  name: B,
  env: Readonly<Record<string, string | undefined>>,
): BenchSettings<B> {
  const groups = { bench: BENCH_GROUPS[name], host: hostGroup } as BenchGroups<B>;
  try {
    return loadGroups(`bench:${name}`, groups, { env }).settings;
  } catch (err) {
    if (!(err instanceof SettingsError)) throw err;
    throw new ValidationError(
      ErrorCode.InvalidConfig,
      `the bench:${name} settings are not valid; fix these environment variables (docs/configuration.md, "Benchmarks", lists each with its default):\n${formatIssues(err.issues)}`,
      err.issues,
    );
  }
}
