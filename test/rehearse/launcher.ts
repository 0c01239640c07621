/**
 * What the emulator's ECS runs tasks on: local containers through evalfleet's container client (containers/), one
 * per container definition, with what ECS gives a task and nothing more — the definition's environment and command
 * (RunTask overrides on top), its secrets read from the local file standing in for Secrets Manager, its user, its
 * read-only root, its volumes (a task-local folder with the image's ownership at that path, as Fargate copies it;
 * a host path such as the docker socket on an eval host), `dependsOn` order, and the variables ECS adds (region,
 * execution environment, the task role's credentials URI). Fargate tasks get a network namespace of their own
 * (vpc.ts); EC2 tasks share their instance's. The only addition ECS would not make: the AWS endpoint override that
 * points the SDK at the emulator.
 */
import { chmod, chown, mkdir, writeFile } from "node:fs/promises";
import path from "node:path";
import type { Container, ContainerRuntime } from "../../containers/index.js";
import type { InstanceLauncher } from "./emulator/asg.js";
import type { ContainerDef, EmuTask, LaunchHooks, TaskLauncher } from "./emulator/ecs.js";
import type { Eni, Vpc } from "./vpc.js";

export interface LauncherOptions {
  rt: ContainerRuntime;
  vpc: Vpc;
  /** an image as the template names it (ECR, by digest) → the local registry's reference */
  image(uri: string): string;
  /** Secrets Manager valueFrom → the value, or undefined when the secret does not exist */
  secret(valueFrom: string): string | undefined;
  /** the task role's credentials: the path ECS would put in AWS_CONTAINER_CREDENTIALS_RELATIVE_URI */
  roleCredentials(role: string): string;
  /** what every task's SDK gets besides (the endpoint override) */
  awsEnv: Record<string, string>;
  /** Cloud Map: family → the name its tasks register under */
  discovery: Map<string, string>;
  /** host paths a task definition may name, mapped to this machine's (the docker socket of an eval host) */
  hostPaths: Record<string, string>;
  /** a container instance ARN → the EC2 instance it is */
  ec2InstanceOf(containerInstanceArn: string): string | undefined;
  workDir: string;
  logDir: string;
  log(line: string): void;
}

interface Running {
  eni: Eni;
  ownEni: boolean;
  containers: Map<string, Container>;
  exited: Set<string>;
}

export class DockerLauncher implements TaskLauncher, InstanceLauncher {
  private readonly running = new Map<string, Running>();
  readonly instances = new Map<string, Eni>();
  private readonly imageDirs = new Map<string, { uid: number; gid: number; mode: number }>();
  readonly counters = { containersStarted: 0, pullFailures: 0 };

  constructor(private readonly o: LauncherOptions) {}

  // ---- instances (eval hosts) ----

  async boot(instanceId: string): Promise<void> {
    this.instances.set(instanceId, await this.o.vpc.eni({ label: instanceId, credentials: true }));
    this.o.log(`instance ${instanceId} in service`);
  }

  async terminate(instanceId: string): Promise<void> {
    await this.instances.get(instanceId)?.close();
    this.instances.delete(instanceId);
    this.o.log(`instance ${instanceId} terminated`);
  }

  // ---- tasks ----

  launch(task: EmuTask, hooks: LaunchHooks): void {
    void this.start(task, hooks).catch((err: unknown) => {
      hooks.failed(err instanceof Error ? err.message : String(err));
      void this.cleanup(task);
    });
  }

  private async start(task: EmuTask, hooks: LaunchHooks): Promise<void> {
    const def = task.def;
    // Images first (a missing one fails the task before anything runs, as ECS does).
    const images = new Map<string, string>();
    for (const c of def.containers) {
      const ref = this.o.image(task.imageOverride ?? c.image);
      try {
        await this.o.rt.ensureImage(ref);
      } catch (err) {
        this.counters.pullFailures++;
        throw new Error(
          `CannotPullContainerError: pull image manifest has been retried 1 time(s): failed to resolve ref ${ref}: ${(err as Error).message}`,
        );
      }
      images.set(c.name, ref);
    }
    const env = new Map<string, Record<string, string>>();
    for (const c of def.containers) env.set(c.name, this.environment(task, c));

    let eni: Eni;
    let ownEni = false;
    if (def.networkMode === "awsvpc") {
      const name = this.o.discovery.get(def.family);
      const ports = def.containers.flatMap((c) => c.portMappings);
      eni = await this.o.vpc.eni({
        label: task.id,
        ...(name ? { serves: { [name]: ports } } : {}),
        credentials: true,
      });
      ownEni = true;
    } else {
      // An EC2 task (bridge mode) reaches the VPC through its instance, so it shares the instance's namespace.
      const ec2 = task.containerInstance ? this.o.ec2InstanceOf(task.containerInstance) : undefined;
      const inst = ec2 ? this.instances.get(ec2) : undefined;
      if (!inst)
        throw new Error(
          `AGENT: no running instance for container instance ${task.containerInstance ?? "(none)"}`,
        );
      eni = inst;
    }
    const run: Running = { eni, ownEni, containers: new Map(), exited: new Set() };
    this.running.set(task.arn, run);

    const volumes = await this.volumes(task, images);
    for (const c of ordered(def.containers)) {
      const spec = {
        image: images.get(c.name)!,
        name: `ef-rehearse-${def.family}-${task.id.slice(0, 12)}-${c.name}`,
        ...((task.overrides[c.name]?.command ?? c.command)
          ? { command: task.overrides[c.name]?.command ?? c.command! }
          : {}),
        ...(c.entryPoint ? { entrypoint: c.entryPoint } : {}),
        ...(c.user ? { user: c.user } : {}),
        ...(c.workingDirectory ? { workdir: c.workingDirectory } : {}),
        env: env.get(c.name)!,
        network: eni.network,
        readOnlyRoot: c.readonlyRootFilesystem,
        mounts: [
          eni.hostsMount,
          ...c.mountPoints.map((m) => ({
            source: volumes.get(m.sourceVolume)!,
            target: m.containerPath,
            readOnly: m.readOnly,
          })),
        ],
        labels: { "io.evalfleet.rehearsal": String(process.pid), "io.evalfleet.task": task.id },
      };
      const container = await this.o.rt.create(spec);
      run.containers.set(c.name, container);
      await container.start();
      this.counters.containersStarted++;
      void this.follow(task, c.name, container, hooks);
    }
    hooks.running();
  }

  private environment(task: EmuTask, c: ContainerDef): Record<string, string> {
    const env: Record<string, string> = {
      AWS_REGION: "us-east-1",
      AWS_DEFAULT_REGION: "us-east-1",
      AWS_EXECUTION_ENV: task.launchType === "FARGATE" ? "AWS_ECS_FARGATE" : "AWS_ECS_EC2",
      ...this.o.awsEnv,
      ...c.environment,
    };
    if (task.def.taskRole)
      env.AWS_CONTAINER_CREDENTIALS_RELATIVE_URI = this.o.roleCredentials(task.def.taskRole);
    for (const [name, valueFrom] of Object.entries(c.secrets)) {
      const v = this.o.secret(valueFrom);
      if (v === undefined)
        throw new Error(
          `ResourceInitializationError: unable to pull secrets or registry auth: unable to retrieve secret from asm: ResourceNotFoundException: ${valueFrom}`,
        );
      env[name] = v;
    }
    Object.assign(env, task.overrides[c.name]?.environment ?? {});
    return env;
  }

  /** Task volumes: a host path (mapped), or a fresh folder owned as the image owns that path (Fargate's copy). */
  private async volumes(task: EmuTask, images: Map<string, string>): Promise<Map<string, string>> {
    const out = new Map<string, string>();
    for (const v of task.def.volumes) {
      if (v.hostPath) {
        const mapped = this.o.hostPaths[v.hostPath];
        if (!mapped) throw new Error(`rehearsal: host path ${v.hostPath} has no stand-in on this machine`);
        out.set(v.name, mapped);
        continue;
      }
      const dir = path.join(this.o.workDir, "volumes", task.id, v.name);
      await mkdir(dir, { recursive: true });
      const user = task.def.containers.find((c) => c.mountPoints.some((m) => m.sourceVolume === v.name));
      const at = user?.mountPoints.find((m) => m.sourceVolume === v.name)?.containerPath;
      if (user && at) {
        const o = await this.imageDir(images.get(user.name)!, at);
        await chown(dir, o.uid, o.gid);
        await chmod(dir, o.mode);
      }
      out.set(v.name, dir);
    }
    return out;
  }

  private async imageDir(image: string, at: string): Promise<{ uid: number; gid: number; mode: number }> {
    const key = `${image} ${at}`;
    const known = this.imageDirs.get(key);
    if (known) return known;
    const r = await this.o.rt.run(
      {
        image,
        entrypoint: ["/bin/sh"],
        command: ["-c", `stat -c '%u %g %a' ${at} 2>/dev/null || echo '0 0 755'`],
        user: "0:0",
      },
      { timeoutMs: 60_000 },
    );
    const [uid, gid, mode] = r.stdout.trim().split(" ");
    const o = { uid: Number(uid), gid: Number(gid), mode: Number.parseInt(mode ?? "755", 8) };
    this.imageDirs.set(key, o);
    return o;
  }

  private async follow(task: EmuTask, name: string, c: Container, hooks: LaunchHooks): Promise<void> {
    const r = await c.wait().catch(() => ({ exitCode: null as number | null, oomKilled: false }));
    const run = this.running.get(task.arn);
    run?.exited.add(name);
    const logs = await c.logs({ tail: 400 }).catch(() => ({ stdout: "", stderr: "" }));
    await writeFile(
      path.join(this.o.logDir, `${task.def.family}-${task.id.slice(0, 12)}-${name}.log`),
      `${logs.stdout}\n--- stderr ---\n${logs.stderr}`,
    ).catch(() => {});
    hooks.exited(
      name,
      r.exitCode ?? null,
      (r as { oomKilled?: boolean }).oomKilled
        ? "OutOfMemoryError: Container killed due to memory usage"
        : undefined,
    );
  }

  async stop(task: EmuTask, graceMs: number): Promise<void> {
    const run = this.running.get(task.arn);
    if (!run) return;
    const live = [...run.containers.entries()].filter(([n]) => !run.exited.has(n));
    await Promise.all(live.map(([, c]) => c.kill("SIGTERM").catch(() => {})));
    const deadline = Date.now() + graceMs;
    while (Date.now() < deadline && [...run.containers.keys()].some((n) => !run.exited.has(n)))
      await new Promise((r) => setTimeout(r, 100));
    await Promise.all(
      [...run.containers.entries()]
        .filter(([n]) => !run.exited.has(n))
        .map(([, c]) => c.kill("SIGKILL").catch(() => {})),
    );
    while ([...run.containers.keys()].some((n) => !run.exited.has(n)))
      await new Promise((r) => setTimeout(r, 50));
    await this.cleanup(task);
  }

  private async cleanup(task: EmuTask): Promise<void> {
    const run = this.running.get(task.arn);
    if (!run) return;
    this.running.delete(task.arn);
    await Promise.all([...run.containers.values()].map((c) => c.remove().catch(() => {})));
    if (run.ownEni) await run.eni.close();
  }

  /** Containers of tasks still running (the rehearsal's "nothing left" check counts them). */
  liveContainers(): number {
    let n = 0;
    for (const r of this.running.values())
      n += [...r.containers.keys()].filter((k) => !r.exited.has(k)).length;
    return n;
  }
}

/** Containers in an order that honours dependsOn (a dependency starts first). */
function ordered(cs: ContainerDef[]): ContainerDef[] {
  const out: ContainerDef[] = [];
  const seen = new Set<string>();
  const visit = (c: ContainerDef) => {
    if (seen.has(c.name)) return;
    seen.add(c.name);
    for (const d of c.dependsOn) {
      const dep = cs.find((x) => x.name === d.containerName);
      if (dep) visit(dep);
    }
    out.push(c);
  };
  for (const c of cs) visit(c);
  return out;
}
