import { mkdir } from "node:fs/promises";
import { createServer } from "node:net";
import { join } from "node:path";
import { actorNames } from "../actors/index.js";
import { openDatabase, type RunningActors, startActors } from "../actors/runtime/main.js";
import {
  type ActorSettings,
  type NatsSettings,
  natsAt,
  type SandboxKind,
  type SettingsOf,
} from "../config/index.js";
import { openGatewayPacer } from "../gateway/pacer.js";
import { runAliasResolver } from "../gateway/run-aliases.js";
import { type Gateway, startGateway } from "../gateway/server.js";
import type { Logger } from "../lib/log.js";
import { startModelCallTracing } from "../lib/otel.js";
import { connectNats } from "../plane/connect.js";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";
import { addOwnSecrets } from "../protocol/redact.js";
import type { Db } from "../store/db.js";
import { openEmbeddedOwner } from "../store/embedded.js";
import { resolveSandbox, sandboxLine, warmSandboxImage } from "../task/sandbox-select.js";
import { type GradingDecision, prepareGrading } from "./grading.js";
import { freePort, localNatsAuth, NatsServerNode, writeNodeConfig } from "./nats-server.js";
import { claimPlaneNats } from "./plane-nats.js";
import { type LocalUpstreams, localUpstreams, SAMPLE_LIBRARY } from "./providers.js";

/** The whole plane on one machine, and how to stop it. */
export interface LocalPlane {
  natsUrl: string;
  /** the connection the plane's processes use (a nats-server of its own, or the one NATS_URL names) */
  nats: NatsSettings;
  /** true when `up` started its own nats-server (and will remove its store) */
  ownNats: boolean;
  db: Db;
  dbLabel: string;
  gateway: Gateway;
  upstreams: LocalUpstreams;
  running: RunningActors;
  /** where the tasks' harnesses run, in one line for the user (containers, or UNSANDBOXED and why) */
  sandbox: string;
  /** where patches are graded (containers from images pinned by digest, or checkouts and why), for the user */
  grading: GradingDecision;
  stop(): Promise<void>;
}

/**
 * Decide once where every attempt's harness runs (EVALFLEET_SANDBOX, default auto: a container per attempt when a
 * Docker API answers) and tell the dispatcher's tasks by setting it; with containers, build the harness image the
 * shipped tasks use now rather than in the first attempts. If that image cannot be had, say why and run
 * unsandboxed — plainly, in the line returned.
 */
async function prepareSandbox(
  want: SandboxKind,
  env: Readonly<Record<string, string>>,
  log: Logger,
): Promise<{ line: string; kind: "container" | "process" }> {
  const d = await resolveSandbox({ ...env, EVALFLEET_SANDBOX: want }, log);
  if (d.kind === "container" && d.runtime) {
    try {
      process.stdout.write("sandbox: preparing the harness image (the first time takes a few minutes)\n");
      const image = await warmSandboxImage(d.runtime, { ...env }, log);
      return { line: sandboxLine(d, image), kind: "container" };
    } catch (err) {
      if (want === "container") throw err;
      const fallback = {
        kind: "process" as const,
        detail: `the harness image could not be built: ${(err as Error).message}`,
      };
      return { line: sandboxLine(fallback), kind: "process" };
    }
  }
  return { line: sandboxLine(d), kind: "process" };
}

/** Can a server listen on 127.0.0.1:`port`? */
function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once("error", () => resolve(false));
    srv.listen(port, "127.0.0.1", () => srv.close(() => resolve(true)));
  });
}

/** Does a NATS server answer at these settings? */
async function natsAnswers(nats: NatsSettings): Promise<boolean> {
  try {
    const nc = await connectNats(nats, { name: "evalfleet-probe", timeoutMs: 1_500, reconnect: false });
    await nc.close();
    return true;
  } catch {
    return false;
  }
}

/**
 * Start the plane in this process from the local launcher's settings: NATS_URL when it answers (or a nats-server
 * of our own, with its store under the state folder); PostgreSQL when configured, else embedded PGlite under the
 * state folder; real providers when asked (`realProviders`) and their keys are set, else the scripted provider; the gateway in front of them;
 * then every actor (the dispatcher launching local processes, whose tasks get this plane's gateway and folders).
 */
export async function startLocalPlane(opts: {
  log: Logger;
  settings: SettingsOf<"local"> | SettingsOf<"start">;
  actors?: string[];
  /** start a nats-server of our own even if one answers at NATS_URL */
  ownNats?: boolean;
  libraryDir?: string;
  /** the command starting the plane, named to whoever finds its database locked (`up`, `start`) */
  command?: string;
  /** own nats-server's port when none answers at NATS_URL (default: any free port) */
  natsPort?: number;
  /** call the real providers whose keys the settings hold; never implied by a key being set */
  realProviders?: boolean;
  /** the task library made ready for grading before runs are taken (default: libraryDir, else the sample's) */
  gradeLibrary?: string;
}): Promise<LocalPlane> {
  const { log, settings } = opts;
  const stateDir = settings.state.dir;
  let nats = settings.nats;
  let node: NatsServerNode | undefined;
  let natsDir: string | undefined;
  // The state folder's NATS is this process's from here on: other commands read its URL from the claim, and no
  // other process starts a nats-server on the same store.
  const claim = await claimPlaneNats(stateDir, opts.command ?? "up");
  const stopNats = async () => {
    await node?.stop();
    await claim.release();
  };
  if (opts.ownNats || !(await natsAnswers(nats))) {
    // The store lives with the rest of the state, so patches and trajectories outlive the plane (report --export)
    // and a plane started again picks up where a crashed one stopped.
    natsDir = join(stateDir, "nats");
    await mkdir(natsDir, { recursive: true });
    const spec = {
      name: "evalfleet-local",
      port: opts.natsPort !== undefined && (await portFree(opts.natsPort)) ? opts.natsPort : await freePort(),
      storeDir: join(natsDir, "store"),
      configFile: join(natsDir, "nats.conf"),
    };
    // Operator mode: no anonymous connection; the plane connects as its plane user, each task as its attempt's.
    const auth = await localNatsAuth(natsDir);
    await writeNodeConfig(spec, [], undefined, auth.config);
    node = new NatsServerNode(spec, settings.natsServer.bin);
    await node.start().catch(async (err: unknown) => {
      await stopNats();
      throw err;
    });
    nats = natsAt(node.url, { auth: { kind: "creds", file: auth.credsFile }, signer: auth.signer });
    log.info({ natsUrl: node.url }, "started nats-server (no server answered at NATS_URL)");
  } else log.info({ natsUrl: nats.servers.join(",") }, "using NATS");
  const natsUrl = nats.servers.join(",");
  await claim.publish(natsUrl, node !== undefined);
  const database = settings.database;
  let db: Db;
  let dbLabel: string;
  let closeDb: () => Promise<void>;
  if (database.kind === "postgres") {
    const opened = await openDatabase(database, { command: opts.command ?? "up", log }).catch(
      async (err: unknown) => {
        await stopNats();
        throw err;
      },
    );
    db = opened.db;
    dbLabel = opened.label;
    closeDb = opened.close;
  } else if (database.kind === "pglite") {
    // Served on 127.0.0.1 so the dashboard, report, watch… connect to this process instead of opening the folder.
    const embedded = await openEmbeddedOwner(database.dataDir, {
      command: opts.command ?? "up",
      serve: true,
      log,
    }).catch(async (err: unknown) => {
      await stopNats();
      throw err;
    });
    db = embedded.db;
    dbLabel = embedded.label;
    closeDb = embedded.close;
  } else throw new Error("the local plane's settings name no database");
  // Real providers only when asked: a key exported for another tool never makes a run spend money.
  if (opts.realProviders && Object.keys(settings.providers).length === 0)
    throw new EvalfleetError(
      ErrorCode.InvalidConfig,
      "--real-providers needs ANTHROPIC_API_KEY or OPENAI_API_KEY (or PROVIDER_KEYS); without it the scripted provider plays the run",
    );
  const upstreams = await localUpstreams(
    opts.libraryDir ?? SAMPLE_LIBRARY,
    opts.realProviders ? settings.providers : {},
    settings.task.mirrorRoot,
    Object.keys(settings.providers),
  );
  const tracer = settings.otel.endpoint
    ? startModelCallTracing({ endpoint: settings.otel.endpoint, serviceName: "evalfleet-gateway" })
    : undefined;
  let gateway: Gateway;
  // The gateway paces every call in its model's pool through the fleet pacer on this plane's NATS (limits as the
  // provider's headers tell them), as deployed replicas do.
  let pacerNc: Awaited<ReturnType<typeof connectNats>> | undefined;
  let pacer: Awaited<ReturnType<typeof openGatewayPacer>> | undefined;
  const closePacer = async () => {
    await pacer?.close();
    await pacerNc?.close();
  };
  try {
    pacerNc = await connectNats(nats, { name: "evalfleet-gateway" });
    pacer = await openGatewayPacer(pacerNc, {}, log.child({ part: "pacer" }));
    gateway = await startGateway({
      db,
      pacer,
      ...(tracer ? { tracer } : {}),
      resolveAlias: runAliasResolver(db, upstreams.upstreams),
      host: settings.gateway.host,
      port: settings.gateway.port,
      log: log.child({ part: "gateway" }),
    });
  } catch (err) {
    await closePacer().catch(() => {});
    await upstreams.scripted?.close();
    await closeDb();
    await stopNats();
    throw err;
  }
  // Whatever was started is stopped when a later step fails, so the process exits with the error, not lingering.
  const abandon = async (err: unknown): Promise<never> => {
    await gateway.close().catch(() => {});
    await closePacer().catch(() => {});
    await upstreams.scripted?.close().catch(() => {});
    await closeDb().catch(() => {});
    await stopNats().catch(() => {});
    throw err;
  };
  // Before any run: the library's images built and pinned, its tasks gold-validated, as the planner requires.
  let grading: GradingDecision;
  try {
    grading = await prepareGrading({
      db,
      env: settings.host.inheritedEnv,
      images: settings.images,
      libraryDir: opts.gradeLibrary ?? opts.libraryDir ?? SAMPLE_LIBRARY,
      log,
    });
  } catch (err) {
    return abandon(err);
  }
  // The judge mints a capped key of its own per run unless one is given (no judge key in this process's env).
  const judgeKey = settings.judge.judgeKey;
  // Where the local backend's tasks run their harnesses, decided once here (and said in the output).
  const backend = { ...settings.backend };
  let sandbox = "";
  if (backend.kind === "local") {
    const decided = await prepareSandbox(backend.sandbox, settings.host.inheritedEnv, log);
    sandbox = decided.line;
    backend.sandbox = decided.kind;
  }
  if (judgeKey) addOwnSecrets([judgeKey]);
  const actorSettings: ActorSettings = {
    log: settings.log,
    nats,
    database,
    topology: settings.topology,
    host: settings.host,
    backend,
    gatewayUrl: { url: gateway.url },
    judge: { gatewayUrl: settings.judge.gatewayUrl || gateway.url, ...(judgeKey ? { judgeKey } : {}) },
    grader: settings.grader,
    library: settings.library,
    task: settings.task,
    // One process: its gateway serves /metrics for every part.
    metrics: { host: settings.gateway.host, port: null },
  };
  let running: RunningActors;
  try {
    running = await startActors(opts.actors ?? actorNames(), { log, db, settings: actorSettings });
  } catch (err) {
    return abandon(err);
  }
  return {
    natsUrl,
    nats,
    ownNats: node !== undefined,
    db,
    dbLabel,
    gateway,
    upstreams,
    running,
    sandbox,
    grading,
    async stop() {
      await running.shutdown(10_000);
      await running.ctx.plane.close();
      await gateway.close();
      await closePacer();
      await tracer?.shutdown();
      await upstreams.scripted?.close();
      await closeDb();
      await stopNats();
    },
  };
}
