/**
 * `npm run rehearse`: the synthesised stack on one machine, with as little stand-in as possible.
 *
 * 1. The images are built offline and pushed by digest (deploy/images/build.ts); the stack is synthesised by the
 *    aws-cdk CLI with those digests (`cdk synth -c images=…`), cdk-nag included.
 * 2. From the template: a three-node NATS cluster booted from the NATS instances' user data (their config and
 *    accounts), every ECS service from its own image with exactly its task definition's environment, secrets and
 *    command, the eval tier's Auto Scaling group, the Cloud Map name of the gateway, each role's IAM actions.
 * 3. Stand-ins, and only these: Secrets Manager is a local file (values generated here, as the stack generates
 *    them; the provider keys are the scripted provider's); Aurora is this machine's PostgreSQL (a fresh database);
 *    the ECS and Auto Scaling APIs are the emulator (test/rehearse/emulator), reached by endpoint override
 *    (`AWS_ENDPOINT_URL_ECS` / `_AUTO_SCALING`, the one variable tasks get that ECS would not give), SigV4-signed,
 *    with task-role credentials at 169.254.170.2 as ECS serves them; the VPC is vpc.ts (a namespace per task);
 *    the model provider on the internet is the scripted provider playing the sample library, which the gateway
 *    reaches at the base URL given to the stack as context; an eval host is a namespace with this machine's docker
 *    socket. `nats pub runs.submit` is a bare core publish (the nats CLI is not installable here): what the CLI
 *    does, no headers, no reply.
 * 4. The scenario: a run submitted raw completes, is graded on an eval host brought up by the scaler, shows in
 *    `watch` and `report` run with the operator's deployed credentials through a tunnel; capacity, missing-image and
 *    access-denied failures are injected and end as they should; `drain`, `cancel` and `teardown` go through the
 *    same APIs; nothing is left running. The last line is one JSON object: `"ok": true` and the figures.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { connect, credsAuthenticator, type NatsConnection } from "@nats-io/transport-node";
import pg from "pg";
import type { ContainerRuntime } from "../../containers/index.js";
import { type BuiltImage, buildAll } from "../../deploy/images/build.js";
import { startSampleProvider } from "../../local/providers.js";
import {
  createNatsAccounts,
  deployedNatsSecrets,
  type NatsAccounts,
  planeUserCreds,
  signerOf,
} from "../../plane/nats-auth.js";
import { testBaseImage, testRegistry, testRuntime } from "../helpers/docker.js";
import { AsgModel } from "./emulator/asg.js";
import { EcsModel } from "./emulator/ecs.js";
import { AwsEmulator } from "./emulator/server.js";
import { DockerLauncher } from "./launcher.js";
import { type BootedNode, bootNatsNode } from "./nats.js";
import { type CfnTemplate, parseValueFrom, TemplateReader } from "./template.js";
import { CREDENTIALS_ADDRESS, Vpc } from "./vpc.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const AWS_API_NAME = "aws-api.rehearsal.internal";
const PROVIDER_NAME = "provider.rehearsal.internal";
const AURORA_NAME = "aurora.rehearsal.internal";
const NATS_PORTS = [4222, 6222, 8222];
const ADMIN_URL = process.env.REHEARSE_ADMIN_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
const DEADLINE_MS = Number(process.env.REHEARSE_DEADLINE_S ?? 900) * 1000;

const log = (line: string) => process.stderr.write(`rehearse: ${line}\n`);

interface Stage {
  name: string;
  ms: number;
}

class Rehearsal {
  readonly stages: Stage[] = [];
  private stageStart = Date.now();
  private readonly cleanups: Array<() => Promise<unknown>> = [];
  work = "";
  logDir = "";

  stage(name: string): void {
    const now = Date.now();
    if (this.stages.length > 0) this.stages[this.stages.length - 1]!.ms = now - this.stageStart;
    this.stages.push({ name, ms: 0 });
    this.stageStart = now;
    log(`— ${name}`);
  }

  defer(fn: () => Promise<unknown>): void {
    this.cleanups.push(fn);
  }

  async cleanup(): Promise<void> {
    // Taken once: a signal during cleanup must not run the same steps again.
    for (const fn of this.cleanups.splice(0).reverse())
      await fn().catch((err: unknown) => log(`cleanup: ${String(err)}`));
  }
}

function run(
  cmd: string,
  args: string[],
  opts: { cwd?: string; env?: NodeJS.ProcessEnv } = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child: ChildProcess = spawn(cmd, args, {
      cwd: opts.cwd ?? ROOT,
      env: { ...process.env, ...opts.env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout?.on("data", (b: Buffer) => {
      stdout += b.toString();
    });
    child.stderr?.on("data", (b: Buffer) => {
      stderr += b.toString();
    });
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

async function must(
  what: string,
  p: Promise<{ code: number | null; stdout: string; stderr: string }>,
): Promise<string> {
  const r = await p;
  if (r.code !== 0)
    throw new Error(`${what} failed (exit ${r.code}):\n${(r.stderr || r.stdout).slice(-3000)}`);
  return r.stdout;
}

async function waitFor<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const end = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < end) {
    try {
      const v = await fn();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    await sleep(250);
  }
  throw new Error(`timed out waiting for ${what}${last ? ` (last: ${String(last)})` : ""}`);
}

/**
 * Secret values, made as the operator makes them (docs/deploy.md): the NATS operator-mode auth from
 * `evalfleet nats-accounts` (server auth, the plane user, the dispatcher's signing key), the provider keys filled
 * by hand (here the scripted provider's), and what the stack generates (the route password, the database
 * credential, to which the attachment adds where the cluster answers).
 */
async function makeSecrets(
  t: TemplateReader,
  db: { user: string; password: string; database: string },
  accounts: NatsAccounts,
): Promise<Record<string, string>> {
  const nats = await deployedNatsSecrets(accounts);
  const out: Record<string, string> = {};
  for (const s of t.secrets()) {
    if (/Natsserverauth/i.test(s.id)) out[s.arn] = nats.serverAuth;
    else if (/Natsplane/i.test(s.id)) out[s.arn] = JSON.stringify(nats.plane);
    else if (/Natssigner/i.test(s.id)) out[s.arn] = JSON.stringify(nats.signer);
    else if (/ProviderKeys/i.test(s.id))
      out[s.arn] = JSON.stringify({
        anthropic: "sk-ant-rehearsal-provider-key",
        openai: "sk-rehearsal-provider-key",
      });
    else if (s.generate?.template)
      out[s.arn] = JSON.stringify({
        ...(JSON.parse(s.generate.template) as object),
        [s.generate.key ?? "password"]: db.password,
        username: db.user,
        host: AURORA_NAME,
        port: 5433,
        dbname: db.database,
        engine: "postgres",
      });
    else if (s.generate)
      out[s.arn] = randomBytes(30)
        .toString("base64url")
        .replace(/[^A-Za-z0-9]/g, "")
        .slice(0, s.generate.length ?? 32);
    else throw new Error(`the stack makes secret ${s.id}, which the rehearsal does not know how to fill`);
  }
  return out;
}

/** Containers and databases an earlier rehearsal left when it was killed (its process is gone). */
async function sweep(rt: ContainerRuntime, admin: pg.Client): Promise<number> {
  let n = 0;
  for (const c of await rt.list({ "io.evalfleet.rehearsal": true })) {
    const pid = Number(c.labels["io.evalfleet.rehearsal"]);
    let alive = false;
    try {
      process.kill(pid, 0);
      alive = pid !== process.pid;
    } catch {
      alive = false;
    }
    if (alive) continue;
    await rt
      .container(c.id)
      .remove()
      .catch(() => {});
    n++;
  }
  const dbs = await admin.query<{ datname: string }>(
    "SELECT datname FROM pg_database WHERE datname LIKE 'evalfleet_rehearse_%'",
  );
  for (const { datname } of dbs.rows) {
    const pid = Number(datname.split("_").pop());
    try {
      process.kill(pid, 0);
    } catch {
      await admin.query(`DROP DATABASE IF EXISTS "${datname}" WITH (FORCE)`);
    }
  }
  return n;
}

async function main(): Promise<Record<string, unknown>> {
  const r = new Rehearsal();
  const started = Date.now();
  // Ctrl-C, or CI's timeout: everything started is stopped and removed before leaving.
  const figures: Record<string, unknown> = {};
  // Stopped early, the last line is still the JSON object: what was reached, and why it stopped.
  const abort = (why: string, code: number) => {
    log(`${why}: cleaning up`);
    void r.cleanup().finally(() => {
      const reached = r.stages.map((s) => s.name);
      process.stdout.write(
        `${JSON.stringify({ ...figures, ok: false, error: why, reached, totalSeconds: Math.round((Date.now() - started) / 1000) })}\n`,
      );
      process.exit(code);
    });
  };
  for (const sig of ["SIGINT", "SIGTERM"] as const) process.once(sig, () => abort(sig, 130));
  const deadline = setTimeout(
    () => abort(`the deadline of ${DEADLINE_MS / 1000}s (REHEARSE_DEADLINE_S) passed`, 1),
    DEADLINE_MS,
  );
  deadline.unref();
  // Unix socket paths are short: the work folder lives under /tmp; logs are kept in .evalfleet/.
  r.work = await mkdtemp("/tmp/efr-");
  r.logDir = path.join(ROOT, ".evalfleet", "rehearse", new Date().toISOString().replace(/[:.]/g, "-"));
  await mkdir(r.logDir, { recursive: true });
  r.defer(() => rm(r.work, { recursive: true, force: true }));
  try {
    r.stage("images");
    const { runtime: rt, dockerHost } = await testRuntime();
    const registry = await testRegistry();
    const swept = new pg.Client({ connectionString: ADMIN_URL });
    await swept.connect().catch((err: unknown) => {
      throw new Error(
        `the rehearsal needs PostgreSQL, Aurora's stand-in, as a role that may create roles and databases: ${ADMIN_URL} refused (${err instanceof Error ? err.message : String(err)}); start it or set REHEARSE_ADMIN_DATABASE_URL`,
      );
    });
    figures.sweptLeftovers = await sweep(rt, swept).finally(() => swept.end());
    if (process.env.REHEARSE_SKIP_BUILD !== "1") await must("npm run build", run("npm", ["run", "build"]));
    const images = await buildAll({
      rt,
      base: (await testBaseImage()).ref,
      registry,
      library: path.join(ROOT, "examples", "tasks"),
      log,
    });
    figures.images = Object.fromEntries(
      Object.entries(images).map(([k, v]) => [k, Math.round(v.sizeBytes / 1e6)]),
    );

    r.stage("synth");
    const digests = Object.fromEntries(Object.entries(images).map(([k, v]) => [k, v.digest]));
    const out = path.join(r.work, "cdk.out");
    await must(
      "cdk synth",
      run(
        "npx",
        [
          "cdk",
          "synth",
          "--quiet",
          "-o",
          out,
          "-c",
          `images=${JSON.stringify(digests)}`,
          "-c",
          `providerBaseUrls=${JSON.stringify({ anthropic: `http://${PROVIDER_NAME}`, openai: `http://${PROVIDER_NAME}` })}`,
        ],
        { cwd: path.join(ROOT, "deploy") },
      ),
    );
    const template = new TemplateReader(
      JSON.parse(await readFile(path.join(out, "Evalfleet.template.json"), "utf8")) as CfnTemplate,
    );
    await rehearse(r, rt, dockerHost, registry, images, template, figures);
    figures.ok = true;
  } catch (err) {
    // Said now: cleaning up can take a minute, and what failed is what the reader wants first. The figures
    // gathered so far still make the last line.
    log(`failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    figures.ok = false;
    figures.error = err instanceof Error ? err.message : String(err);
  } finally {
    r.stage("cleanup");
    const cleanupStart = Date.now();
    await r.cleanup();
    // Nothing this rehearsal started may outlive it.
    const { runtime } = await testRuntime();
    const left = await runtime.list({ "io.evalfleet.rehearsal": String(process.pid) });
    figures.containersLeft = left.length;
    if (left.length > 0) {
      figures.ok = false;
      log(`left running: ${left.map((c) => c.name).join(", ")}`);
      await runtime.removeAll({ "io.evalfleet.rehearsal": String(process.pid) }).catch(() => {});
    }
    r.stages[r.stages.length - 1]!.ms = Date.now() - cleanupStart;
    figures.stagesMs = Object.fromEntries(r.stages.map((s) => [s.name, s.ms]));
    figures.totalSeconds = Math.round((Date.now() - started) / 100) / 10;
    figures.logs = r.logDir;
    clearTimeout(deadline);
  }
  return figures;
}

async function rehearse(
  r: Rehearsal,
  rt: ContainerRuntime,
  dockerHost: string,
  registry: string,
  images: Record<string, BuiltImage>,
  t: TemplateReader,
  figures: Record<string, unknown>,
): Promise<void> {
  r.stage("data");
  const dbName = `evalfleet_rehearse_${process.pid}`;
  const dbUser = String(
    JSON.parse(
      t.secrets().find((s) => s.generate?.template)?.generate?.template ?? '{"username":"evalfleet"}',
    ).username,
  );
  const dbPassword = randomBytes(18).toString("hex");
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  await admin.query(
    `DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '${dbUser}') THEN CREATE ROLE "${dbUser}" LOGIN; END IF; END $$`,
  );
  await admin.query(`ALTER ROLE "${dbUser}" LOGIN PASSWORD '${dbPassword}'`);
  await admin.query(`CREATE DATABASE "${dbName}" OWNER "${dbUser}"`);
  r.defer(async () => {
    await admin.query(`DROP DATABASE IF EXISTS "${dbName}" WITH (FORCE)`);
    await admin.end();
  });
  const accounts = await createNatsAccounts();
  const secrets = await makeSecrets(t, { user: dbUser, password: dbPassword, database: dbName }, accounts);
  await writeFile(path.join(r.work, "secrets.json"), JSON.stringify(secrets, null, 2), { mode: 0o600 });
  const secret = (valueFrom: string): string | undefined => {
    const { arn, key } = parseValueFrom(valueFrom);
    const v = secrets[arn];
    if (v === undefined || key === undefined) return v;
    const field = (JSON.parse(v) as Record<string, unknown>)[key];
    return field === undefined ? undefined : String(field);
  };
  const imageRef = (uri: string) => uri.replace(/^\d+\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com/, registry);

  r.stage("network");
  const vpcDir = path.join(r.work, "vpc");
  await mkdir(vpcDir, { recursive: true });
  const vpc = new Vpc(rt, vpcDir, images.actors!.ref, path.join(ROOT, "test", "rehearse", "eni.mjs"));
  r.defer(() => vpc.close());
  // Every route is known before the first namespace is made.
  const nodes = t.instances().filter((i) => i.dnsNames.length > 0);
  for (const n of nodes) for (const p of NATS_PORTS) await vpc.route(n.dnsNames[0]!, p);
  const namespace = t.namespace();
  const discovery = new Map<string, string>();
  const defs = t.taskDefinitions();
  for (const s of t.services())
    if (s.discoveryName) discovery.set(defs.get(s.taskDef)!.family, `${s.discoveryName}.${namespace}`);
  for (const [family, name] of discovery)
    for (const c of [...defs.values()].find((d) => d.family === family)!.containers)
      for (const p of c.portMappings) await vpc.route(name, p);
  await vpc.route(AURORA_NAME, 5433, { kind: "tcp", host: "127.0.0.1", port: 5432 });
  const provider = await startSampleProvider(
    path.join(ROOT, "examples", "tasks"),
    path.join(r.work, "mirrors"),
  );
  r.defer(() => provider.close());
  await vpc.route(PROVIDER_NAME, 80, {
    kind: "tcp",
    host: "127.0.0.1",
    port: Number(new URL(provider.url).port),
  });
  const emulatorSocket = path.join(vpcDir, "aws.sock");
  await vpc.route(AWS_API_NAME, 80, { kind: "unix", path: emulatorSocket });
  await vpc.route("ecs-credentials", 80, { kind: "unix", path: emulatorSocket }, CREDENTIALS_ADDRESS);

  r.stage("nats");
  const natsImage = (uri: string) => imageRef(uri);
  const booted: BootedNode[] = [];
  for (const n of nodes) {
    const node = await bootNatsNode({
      rt,
      vpc,
      name: n.dnsNames[0]!,
      userData: n.userData,
      root: path.join(r.work, "hosts", n.id),
      secret: (arn) => {
        const v = secrets[arn];
        if (v === undefined)
          throw new Error(`boot script reads secret ${arn}, which the stack does not make`);
        return v;
      },
      image: natsImage,
      ports: NATS_PORTS,
    });
    booted.push(node);
    r.defer(async () => {
      const logs = await node.container.logs({ tail: 300 }).catch(() => ({ stdout: "", stderr: "" }));
      await writeFile(path.join(r.logDir, `${node.name}.log`), `${logs.stdout}\n${logs.stderr}`);
      await node.container.kill().catch(() => {});
      await node.container.remove().catch(() => {});
      await node.eni.close();
    });
  }
  const monitor = await vpc.tunnel(nodes[0]!.dnsNames[0]!, 8222);
  r.defer(() => monitor.close());
  await waitFor(
    "the NATS cluster's JetStream",
    async () => {
      const res = await fetch(`http://127.0.0.1:${monitor.port}/healthz?js-enabled-only=true`);
      const jsz = (await (await fetch(`http://127.0.0.1:${monitor.port}/jsz`)).json()) as {
        meta_cluster?: { leader?: string; cluster_size?: number };
      };
      // Every node in the meta group, not only a quorum: the streams are made with three replicas.
      const m = jsz.meta_cluster;
      return res.ok && m?.leader && (m.cluster_size ?? 0) >= booted.length ? m : undefined;
    },
    90_000,
  ).then((m) => {
    figures.natsCluster = { nodes: booted.length, leader: m.leader, size: m.cluster_size };
  });

  r.stage("control plane");
  const clusterName = String(t.ofType("AWS::ECS::Cluster")[0]?.[1].Properties?.ClusterName ?? "evalfleet");
  const emu: { ecs?: EcsModel; aws?: AwsEmulator } = {};
  const roleActions = t.roleActions();
  const launcher: DockerLauncher = new DockerLauncher({
    rt,
    vpc,
    image: imageRef,
    secret,
    roleCredentials: (role) =>
      `/v2/credentials/${aws.issueTaskCredentials(role, roleActions.get(role) ?? []).id}`,
    awsEnv: {
      AWS_ENDPOINT_URL_ECS: `http://${AWS_API_NAME}`,
      AWS_ENDPOINT_URL_AUTO_SCALING: `http://${AWS_API_NAME}`,
    },
    discovery,
    hostPaths: { "/var/run/docker.sock": dockerHost.replace(/^unix:\/\//, "") },
    ec2InstanceOf: (arn) => emu.ecs?.instances.get(arn)?.ec2InstanceId,
    workDir: r.work,
    logDir: r.logDir,
    log,
  });
  const ecs = new EcsModel(launcher, { cluster: clusterName });
  emu.ecs = ecs;
  const asg = new AsgModel(ecs, launcher);
  const aws = new AwsEmulator(ecs, asg);
  emu.aws = aws;
  await aws.listen(emulatorSocket);
  const operatorKey = {
    accessKeyId: "AKIAREHEARSALOPERATOR",
    secretAccessKey: randomBytes(20).toString("hex"),
  };
  aws.addPrincipal({ ...operatorKey, principal: "operator", allow: ["*"] });
  const hostEndpoint = await aws.listen(0);
  r.defer(() => aws.close());
  const byId = new Map<string, string>();
  for (const [id, def] of defs) byId.set(id, ecs.register(def).arn);
  for (const g of t.autoScalingGroups()) asg.addGroup(g);
  for (const s of t.services())
    ecs.addService({
      name: s.name,
      def: ecs.definition(byId.get(s.taskDef)!)!,
      desiredCount: s.desiredCount,
      daemon: s.daemon,
      launchType: s.launchType,
    });
  ecs.startScheduler(1000);
  r.defer(async () => {
    ecs.stopScheduler();
    await Promise.allSettled(
      ecs
        .live()
        .map((task) => ecs.stopTask({ cluster: clusterName, task: task.arn, reason: "rehearsal over" })),
    );
    await waitFor(
      "every task stopped",
      async () => (ecs.live().length === 0 && launcher.liveContainers() === 0 ? true : undefined),
      60_000,
    ).catch(() => {});
    await Promise.allSettled([...launcher.instances.keys()].map((id) => launcher.terminate(id)));
  });

  // The operator's view: a tunnel to NATS (the SSM port forward of docs/deploy.md) and the deployed credentials.
  const natsTunnel = await vpc.tunnel(nodes[0]!.dnsNames[0]!, 4222);
  r.defer(() => natsTunnel.close());
  // The operator's own user of the account, as `evalfleet nats-accounts` writes it (plane.creds).
  const operatorCreds = await planeUserCreds(signerOf(accounts), "operator");
  const credsFile = path.join(r.work, "operator.creds");
  await writeFile(credsFile, operatorCreds, { mode: 0o600 });
  const operatorEnv: NodeJS.ProcessEnv = {
    NATS_URL: `nats://127.0.0.1:${natsTunnel.port}`,
    NATS_CREDS: credsFile,
    DATABASE_URL: `postgres://${dbUser}:${dbPassword}@127.0.0.1:5432/${dbName}`,
    AWS_ENDPOINT_URL_ECS: hostEndpoint,
    AWS_ENDPOINT_URL_AUTO_SCALING: hostEndpoint,
    AWS_REGION: "us-east-1",
    AWS_ACCESS_KEY_ID: operatorKey.accessKeyId,
    AWS_SECRET_ACCESS_KEY: operatorKey.secretAccessKey,
    EVALFLEET_ECS_CLUSTER: clusterName,
    EVALFLEET_EVAL_ASG: t.autoScalingGroups()[0]?.name ?? "",
  };
  let nc: NatsConnection | undefined;
  const heartbeats = await waitFor(
    "every actor's heartbeat",
    async () => {
      nc ??= await connect({
        servers: String(operatorEnv.NATS_URL),
        authenticator: credsAuthenticator(new TextEncoder().encode(operatorCreds)),
        timeout: 5000,
      });
      const { jetstream } = await import("@nats-io/jetstream");
      const { Kvm } = await import("@nats-io/kv");
      const kv = await new Kvm(jetstream(nc)).open("progress");
      const keys: string[] = [];
      for await (const k of await kv.keys("actor.>")) keys.push(k);
      const names = new Set(keys.map((k) => k.split(".")[1]));
      const missing = ["planner", "dispatcher", "results-writer", "grader-supervisor", "judge"].filter(
        (a) => !names.has(a),
      );
      if (missing.length > 0) throw new Error(`no heartbeat yet from ${missing.join(", ")}`);
      return [...names];
    },
    180_000,
  );
  figures.actors = heartbeats;
  r.defer(async () => nc?.close());

  r.stage("a run, submitted raw");
  const runName = `rehearsal-${process.pid}`;
  const runYaml = [
    `name: ${runName}`,
    "harnesses: [{ name: reference, adapter: reference }]",
    "models: [{ name: claude-sonnet-4-5, provider: anthropic }]",
    'tasks: ["sample-calc-add", "sample-ranges-sum"]',
    "task_library_path: /opt/evalfleet/library",
    "repeats: 2",
    "parallel_runs: 4",
    "budget_usd: 2",
    "max_turns: 20",
    "max_cost_usd: 0.5",
    "timeout_seconds: 300",
    // the rehearsed stack's database holds no gold validation of the shipped tasks
    "unvalidated: true",
  ].join("\n");
  // Failures AWS really produces, injected at the wire: the capacity one is retried and its cell still completes;
  // a missing image and access denied are final for their cell and never count as the model's result.
  ecs.inject("capacity", 2);
  ecs.inject("missing-image", 1);
  ecs.inject("access-denied", 1);
  // What `nats pub runs.submit "$(cat run.yaml)"` does: one core publish, no headers, no reply.
  nc!.publish("runs.submit", runYaml);
  await nc!.flush();
  const { jetstream } = await import("@nats-io/jetstream");
  const { Kvm } = await import("@nats-io/kv");
  const progress = await new Kvm(jetstream(nc!)).open("progress");
  const runKey = `run.${runName}`;
  const progressOf = async () => {
    const e = await progress.get(runKey);
    return e && e.operation === "PUT"
      ? (e.json() as {
          phase: string;
          totalCells: number;
          completed: number;
          failed: number;
          running: number;
          message: string;
        })
      : undefined;
  };
  const planned = await waitFor("the planner's verdict", progressOf, 120_000);
  if (planned.phase === "rejected") throw new Error(`the planner rejected the run: ${planned.message}`);
  figures.cells = planned.totalCells;
  const watchFirst = await must(
    "evalfleet watch --once",
    run(process.execPath, [path.join(ROOT, "bin", "evalfleet.js"), "watch", runName, "--once", "--json"], {
      env: operatorEnv,
    }),
  );
  figures.watch = JSON.parse(watchFirst.trim().split("\n").pop() ?? "{}") as unknown;

  r.stage("run to the end");
  const hostsSeen = new Set<string>();
  const done = await waitFor(
    "the run to finish",
    async () => {
      for (const id of launcher.instances.keys()) hostsSeen.add(id);
      const p = await progressOf();
      return p && p.phase === "finished" ? p : undefined;
    },
    DEADLINE_MS / 2,
  );
  figures.finished = { completed: done.completed, failed: done.failed, total: done.totalCells };
  figures.evalHosts = { seen: hostsSeen.size, desiredHistory: asg.counters.desiredHistory };
  if (hostsSeen.size === 0)
    throw new Error("no eval host was brought up: the scaler did not scale the eval tier");

  r.stage("report");
  const report = await must(
    "evalfleet report",
    run(process.execPath, [path.join(ROOT, "bin", "evalfleet.js"), "report", runName, "--format", "json"], {
      env: operatorEnv,
    }),
  );
  figures.report = JSON.parse(report) as unknown;

  r.stage("drain, cancel, teardown");
  const drain = await run(process.execPath, [path.join(ROOT, "bin", "evalfleet.js"), "drain", runName], {
    env: operatorEnv,
  });
  const cancel = await run(process.execPath, [path.join(ROOT, "bin", "evalfleet.js"), "cancel", runName], {
    env: operatorEnv,
  });
  figures.control = {
    drain: drain.stdout.trim() || drain.stderr.trim(),
    cancel: cancel.stdout.trim() || cancel.stderr.trim(),
  };
  const td = await run(
    process.execPath,
    [path.join(ROOT, "bin", "evalfleet.js"), "teardown", "--run", runName, "--json"],
    {
      env: operatorEnv,
    },
  );
  if (td.code !== 0) throw new Error(`teardown failed (exit ${td.code}): ${td.stdout}${td.stderr}`);
  figures.teardown = JSON.parse(td.stdout) as unknown;
  await asg.settled();
  const harnessLeft = ecs.live((task) => task.def.family.startsWith("evalfleet-harness"));
  const hostsLeft = launcher.instances.size;
  figures.leftAfterTeardown = { harnessTasks: harnessLeft.length, evalHosts: hostsLeft };
  if (harnessLeft.length > 0 || hostsLeft > 0)
    throw new Error(
      `teardown left ${harnessLeft.length} harness task(s) and ${hostsLeft} eval host(s) running`,
    );
  figures.ecs = ecs.counters;
  figures.aws = {
    requests: aws.counters.requests,
    signatureRefused: aws.counters.signatureRefused,
    byAction: aws.counters.byAction,
  };
  figures.vpc = vpc.counters;
}

main()
  .then((figures) => {
    process.stdout.write(`${JSON.stringify(figures)}\n`);
    if (figures.ok !== true) process.exitCode = 1;
  })
  .catch((err: unknown) => {
    log(err instanceof Error ? (err.stack ?? err.message) : String(err));
    process.stdout.write(
      `${JSON.stringify({ ok: false, error: err instanceof Error ? err.message : String(err) })}\n`,
    );
    process.exitCode = 1;
  });
