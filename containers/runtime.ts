/** The runtime client: one dockerode instance bound to one endpoint, with evalfleet's defaults applied. */
import { createReadStream } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import path from "node:path";
import type { Readable } from "node:stream";
import Dockerode from "dockerode";
import type { Logger } from "../lib/log.js";
import { silentLogger } from "../lib/log.js";
import { Container, type WaitResult } from "./container.js";
import { type Endpoint, resolveEndpoint, unavailableHint } from "./endpoint.js";
import { ContainerError, toContainerError } from "./errors.js";
import { followProgress } from "./progress.js";

/** Every container and image evalfleet creates carries this label (value "true"), so leftovers can be found. */
export const MANAGED_LABEL = "io.evalfleet.managed";

export interface BindMount {
  /** Host path (a file, a folder, or a folder holding a unix socket). */
  source: string;
  target: string;
  readOnly?: boolean;
}

export interface Limits {
  /** Hard memory limit; swap is set to the same so the limit is not doubled by swap. */
  memoryBytes?: number;
  /** CPUs, fractional (1.5). */
  cpus?: number;
  /** Processes and threads at most (fork bombs stop here). */
  pids?: number;
}

export interface ContainerSpec {
  /** Image reference; pin by digest (`name@sha256:…`) wherever a verdict depends on it. */
  image: string;
  /** Container name (docker's alphabet); default: the daemon's random one. */
  name?: string;
  command?: readonly string[];
  entrypoint?: readonly string[];
  /** `uid`, `uid:gid` or a name the image knows. */
  user?: string;
  env?: Record<string, string>;
  workdir?: string;
  mounts?: readonly BindMount[];
  /** target → mount options (`rw,size=64m,mode=1777`). */
  tmpfs?: Record<string, string>;
  readOnlyRoot?: boolean;
  /** Default "none": these machines have no bridge network, and nothing graded or attempted needs one. */
  network?: "none" | (string & {});
  limits?: Limits;
  labels?: Record<string, string>;
  /** Capabilities dropped (e.g. ["ALL"]); default none dropped. */
  capDrop?: readonly string[];
  /** Sets no-new-privileges: setuid binaries cannot raise privileges. */
  noNewPrivileges?: boolean;
  /** Run docker's init as PID 1 so orphans are reaped and signals forwarded. */
  init?: boolean;
  /**
   * The daemon's log driver; default the daemon's. `none` keeps nothing on the daemon's disk (output is then read
   * only through `Container.attachOutput`, bounded by the caller), so a container printing without end fills
   * no disk.
   */
  logDriver?: "none" | "json-file" | "local";
  platform?: string;
}

export interface RunOptions {
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface RunResult extends WaitResult {
  stdout: string;
  stderr: string;
  combined: string;
}

export interface ImageInfo {
  id: string;
  /** `repo@sha256:…` for every registry the image was pushed to or pulled from. */
  repoDigests: string[];
  repoTags: string[];
  labels: Record<string, string>;
  /** The image's configured user ("" = root). */
  user: string;
  sizeBytes: number;
}

export interface ContainerSummary {
  id: string;
  name: string;
  image: string;
  state: string;
  labels: Record<string, string>;
}

export interface RegistryAuth {
  username?: string;
  password?: string;
  serveraddress?: string;
  identitytoken?: string;
}

export interface BuildOptions {
  /** `repo:tag` given to the result. */
  tag: string;
  /** Default "Dockerfile" (relative to the context). */
  dockerfile?: string;
  /** Default "none": a build can reach nothing, so all it needs must be in the context. */
  network?: "none" | (string & {});
  labels?: Record<string, string>;
  buildArgs?: Record<string, string>;
  signal?: AbortSignal;
  /** Build output lines as they come. */
  onOutput?: (text: string) => void;
}

export interface ConnectOptions {
  /**
   * Where the runtime is found: DOCKER_HOST, DOCKER_TLS_VERIFY, DOCKER_CERT_PATH, XDG_RUNTIME_DIR from this
   * environment (the caller's, from its settings); absent: the default sockets.
   */
  env?: NodeJS.ProcessEnv;
  endpoint?: Endpoint;
  logger?: Logger;
  /** How long the availability check waits for an answer. Default 5 s. */
  pingTimeoutMs?: number;
}

export interface RuntimeInfo {
  endpoint: string;
  serverVersion: string;
  apiVersion: string;
  /** Podman answers the same API; a few behaviours differ, callers may want to say which it was. */
  podman: boolean;
  /** CPUs and memory of the daemon's host: limits above them are refused, so callers clamp to them. */
  cpus: number;
  memoryBytes: number;
}

async function dockerodeFor(ep: Endpoint): Promise<Dockerode> {
  if (ep.kind === "unix") return new Dockerode({ socketPath: ep.socketPath });
  if (ep.kind === "ssh") {
    return new Dockerode({
      protocol: "ssh",
      host: ep.host,
      port: ep.port,
      ...(ep.username ? { username: ep.username } : {}),
    });
  }
  const tls = ep.certPath
    ? {
        ca: await readFile(path.join(ep.certPath, "ca.pem")),
        cert: await readFile(path.join(ep.certPath, "cert.pem")),
        key: await readFile(path.join(ep.certPath, "key.pem")),
      }
    : {};
  return new Dockerode({ protocol: ep.protocol, host: ep.host, port: ep.port, ...tls });
}

function isDigestRef(ref: string): boolean {
  return /@sha256:[0-9a-f]{64}$/.test(ref);
}

/** `host:port/name:tag` → { repo: "host:port/name", tag }; the tag defaults to latest, a digest stays. */
export function splitReference(ref: string): { repo: string; tag?: string; digest?: string } {
  const at = ref.indexOf("@");
  if (at !== -1) return { repo: ref.slice(0, at), digest: ref.slice(at + 1) };
  const slash = ref.lastIndexOf("/");
  const colon = ref.lastIndexOf(":");
  if (colon > slash) return { repo: ref.slice(0, colon), tag: ref.slice(colon + 1) };
  return { repo: ref, tag: "latest" };
}

export class ContainerRuntime {
  private constructor(
    readonly docker: Dockerode,
    readonly info: RuntimeInfo,
    private readonly log: Logger,
  ) {}

  /**
   * Connect and check that a Docker API answers. Throws ContainerError("unavailable") with a message that says
   * where it looked and what to start; `invalid` when DOCKER_HOST cannot be parsed.
   */
  static async connect(opts: ConnectOptions = {}): Promise<ContainerRuntime> {
    const env = opts.env ?? {};
    const ep = opts.endpoint ?? resolveEndpoint(env);
    const docker = await dockerodeFor(ep);
    const timeoutMs = opts.pingTimeoutMs ?? 5_000;
    let version: Dockerode.DockerVersion;
    try {
      version = await withTimeout(docker.version(), timeoutMs, "ping");
    } catch (err) {
      throw new ContainerError("unavailable", unavailableHint(ep, env), { cause: err });
    }
    const podman = (version.Components ?? []).some((c) => /podman/i.test(c.Name));
    let host: { NCPU?: number; MemTotal?: number } = {};
    try {
      host = (await withTimeout(docker.info(), timeoutMs, "info")) as typeof host;
    } catch (err) {
      throw new ContainerError("unavailable", unavailableHint(ep, env), { cause: err });
    }
    return new ContainerRuntime(
      docker,
      {
        endpoint: ep.label,
        serverVersion: version.Version,
        apiVersion: version.ApiVersion,
        podman,
        cpus: host.NCPU ?? 1,
        memoryBytes: host.MemTotal ?? 0,
      },
      opts.logger ?? silentLogger(),
    );
  }

  /** Like connect, but answers instead of throwing: for "use containers when docker answers". */
  static async probe(
    opts: ConnectOptions = {},
  ): Promise<{ ok: true; runtime: ContainerRuntime } | { ok: false; reason: string }> {
    try {
      return { ok: true, runtime: await ContainerRuntime.connect(opts) };
    } catch (err) {
      return { ok: false, reason: (err as Error).message };
    }
  }

  /** Create (not start) a container from the spec, with evalfleet's defaults: network none, managed label. */
  async create(spec: ContainerSpec): Promise<Container> {
    const limits = spec.limits ?? {};
    const securityOpt = spec.noNewPrivileges ? ["no-new-privileges"] : [];
    const createOpts: Dockerode.ContainerCreateOptions = {
      Image: spec.image,
      ...(spec.name !== undefined ? { name: spec.name } : {}),
      ...(spec.command !== undefined ? { Cmd: [...spec.command] } : {}),
      ...(spec.entrypoint !== undefined ? { Entrypoint: [...spec.entrypoint] } : {}),
      ...(spec.user !== undefined ? { User: spec.user } : {}),
      ...(spec.workdir !== undefined ? { WorkingDir: spec.workdir } : {}),
      ...(spec.env !== undefined ? { Env: Object.entries(spec.env).map(([k, v]) => `${k}=${v}`) } : {}),
      ...(spec.platform !== undefined ? { platform: spec.platform } : {}),
      Labels: { ...spec.labels, [MANAGED_LABEL]: "true" },
      Tty: false,
      AttachStdin: false,
      OpenStdin: false,
      NetworkDisabled: (spec.network ?? "none") === "none",
      HostConfig: {
        NetworkMode: spec.network ?? "none",
        Mounts: (spec.mounts ?? []).map((m) => ({
          Type: "bind" as const,
          Source: m.source,
          Target: m.target,
          ReadOnly: m.readOnly ?? false,
        })),
        ...(spec.tmpfs ? { Tmpfs: { ...spec.tmpfs } } : {}),
        ReadonlyRootfs: spec.readOnlyRoot ?? false,
        ...(limits.memoryBytes !== undefined
          ? { Memory: limits.memoryBytes, MemorySwap: limits.memoryBytes }
          : {}),
        ...(limits.cpus !== undefined ? { NanoCpus: Math.round(limits.cpus * 1e9) } : {}),
        ...(limits.pids !== undefined ? { PidsLimit: limits.pids } : {}),
        ...(spec.capDrop ? { CapDrop: [...spec.capDrop] } : {}),
        ...(securityOpt.length ? { SecurityOpt: securityOpt } : {}),
        ...(spec.init ? { Init: true } : {}),
        ...(spec.logDriver ? { LogConfig: { Type: spec.logDriver, Config: {} } } : {}),
        AutoRemove: false,
      },
    };
    try {
      const c = await this.docker.createContainer(createOpts);
      const name = spec.name ?? (await c.inspect()).Name.replace(/^\//, "");
      this.log.debug({ container: name, image: spec.image }, "container created");
      return new Container(c, c.id, name);
    } catch (err) {
      throw toContainerError(err, "create", `creating a container from ${spec.image}`);
    }
  }

  /** A handle on an existing container by id or name (nothing is checked until it is used). */
  container(idOrName: string): Container {
    return new Container(this.docker.getContainer(idOrName), idOrName, idOrName);
  }

  /**
   * Create, start, wait (killing it past the timeout), read the logs, and remove it and its anonymous volumes
   * whatever happened.
   */
  async run(spec: ContainerSpec, opts: RunOptions = {}): Promise<RunResult> {
    const c = await this.create(spec);
    try {
      await c.start();
      const waited = await c.wait(opts);
      const logs = await c.logs();
      return { ...waited, ...logs };
    } finally {
      await c.remove().catch((err) => this.log.warn({ err, container: c.name }, "container removal failed"));
    }
  }

  /** Containers (running or not) carrying every label given (`key` alone matches any value). */
  async list(labels: Record<string, string | true>): Promise<ContainerSummary[]> {
    const filters = {
      label: Object.entries(labels).map(([k, v]) => (v === true ? k : `${k}=${v}`)),
    };
    try {
      const rows = await this.docker.listContainers({ all: true, filters: JSON.stringify(filters) });
      return rows.map((r) => ({
        id: r.Id,
        name: (r.Names[0] ?? r.Id).replace(/^\//, ""),
        image: r.Image,
        state: r.State,
        labels: r.Labels ?? {},
      }));
    } catch (err) {
      throw toContainerError(err, "runtime", "listing containers");
    }
  }

  /** Remove (killing first) every container carrying the labels; returns their names. */
  async removeAll(labels: Record<string, string | true>): Promise<string[]> {
    const found = await this.list(labels);
    await Promise.all(found.map((c) => this.container(c.id).remove()));
    return found.map((c) => c.name);
  }

  /** The image's id, repo digests, labels and user; null when the daemon does not have it. */
  async inspectImage(ref: string): Promise<ImageInfo | null> {
    try {
      const i = await this.docker.getImage(ref).inspect();
      return {
        id: i.Id,
        repoDigests: i.RepoDigests ?? [],
        repoTags: i.RepoTags ?? [],
        labels: i.Config?.Labels ?? {},
        user: i.Config?.User ?? "",
        sizeBytes: i.Size,
      };
    } catch (err) {
      const e = toContainerError(err, "runtime", `inspecting image ${ref}`);
      if (e.failure === "not_found") return null;
      throw e;
    }
  }

  /** The `sha256:…` the image has in `repo` (the part before `@` of a RepoDigest), or null. */
  async repoDigest(ref: string, repo = splitReference(ref).repo): Promise<string | null> {
    const info = await this.inspectImage(ref);
    const hit = info?.repoDigests.find((d) => d.slice(0, d.indexOf("@")) === repo);
    return hit ? hit.slice(hit.indexOf("@") + 1) : null;
  }

  /** Pull from its registry. ContainerError("pull"), or "not_found" when the registry has no such image. */
  async pull(ref: string, opts: { auth?: RegistryAuth; signal?: AbortSignal } = {}): Promise<void> {
    let stream: Readable;
    try {
      stream = (await this.docker.pull(ref, opts.auth ? { authconfig: opts.auth } : {})) as Readable;
    } catch (err) {
      throw toContainerError(err, "pull", `pulling ${ref}`);
    }
    await followProgress(stream, "pull", `pulling ${ref}`, opts.signal);
  }

  /** Pull unless the daemon already has it (a digest reference cannot change, so presence is enough). */
  async ensureImage(ref: string, opts: { auth?: RegistryAuth; signal?: AbortSignal } = {}): Promise<void> {
    if (isDigestRef(ref) && (await this.inspectImage(ref)) !== null) return;
    if (!isDigestRef(ref) && (await this.inspectImage(ref)) !== null) return;
    await this.pull(ref, opts);
  }

  /** Give `source` the name `target` (`repo:tag`). */
  async tag(source: string, target: string): Promise<void> {
    const { repo, tag } = splitReference(target);
    try {
      await this.docker.getImage(source).tag({ repo, tag: tag ?? "latest" });
    } catch (err) {
      throw toContainerError(err, "runtime", `tagging ${source} as ${target}`);
    }
  }

  /** Push `repo:tag`; returns the digest the registry stored it under. */
  async push(ref: string, opts: { auth?: RegistryAuth; signal?: AbortSignal } = {}): Promise<string> {
    const { repo, tag } = splitReference(ref);
    let stream: Readable;
    try {
      stream = (await this.docker.getImage(repo).push({
        tag: tag ?? "latest",
        ...(opts.auth ? { authconfig: opts.auth } : {}),
      })) as Readable;
    } catch (err) {
      throw toContainerError(err, "push", `pushing ${ref}`);
    }
    const r = await followProgress(stream, "push", `pushing ${ref}`, opts.signal);
    const digest = r.aux?.Digest;
    if (!digest || !/^sha256:[0-9a-f]{64}$/.test(digest)) {
      throw new ContainerError("push", `pushing ${ref}: the registry reported no digest`);
    }
    return digest;
  }

  /** Build from a context folder (its .dockerignore honoured); returns the image id. */
  async build(contextDir: string, opts: BuildOptions): Promise<string> {
    const entries = await readdir(contextDir).catch((err: NodeJS.ErrnoException) => {
      throw new ContainerError("invalid", `build context ${contextDir} cannot be read (${err.code})`);
    });
    let stream: Readable;
    try {
      stream = (await this.docker.buildImage(
        { context: contextDir, src: entries },
        {
          t: opts.tag,
          dockerfile: opts.dockerfile ?? "Dockerfile",
          networkmode: opts.network ?? "none",
          rm: true,
          forcerm: true,
          labels: { ...opts.labels, [MANAGED_LABEL]: "true" },
          ...(opts.buildArgs ? { buildargs: opts.buildArgs } : {}),
        },
      )) as Readable;
    } catch (err) {
      throw toContainerError(err, "build", `building ${opts.tag} from ${contextDir}`);
    }
    if (opts.onOutput) {
      const onOutput = opts.onOutput;
      stream.on("data", (b: Buffer) => {
        for (const line of b.toString().split("\n")) {
          try {
            const s = (JSON.parse(line) as { stream?: string }).stream;
            if (s) onOutput(s);
          } catch {
            // partial line: the progress reader sees it whole
          }
        }
      });
    }
    const r = await followProgress(stream, "build", `building ${opts.tag}`, opts.signal);
    const info = await this.inspectImage(opts.tag);
    if (!info)
      throw new ContainerError("build", `building ${opts.tag}: no image came out\n${r.text.slice(-2000)}`);
    return info.id;
  }

  /**
   * Import a root filesystem tarball (a file path or a stream of `tar -c .`) as the image `repo:tag`;
   * `changes` are Dockerfile instructions applied on import (`ENV PATH=…`, `WORKDIR /`). Returns the image id.
   */
  async importRootfs(
    tarball: string | Readable,
    target: string,
    opts: { changes?: readonly string[]; signal?: AbortSignal } = {},
  ): Promise<string> {
    const { repo, tag } = splitReference(target);
    const source = typeof tarball === "string" ? createReadStream(tarball) : tarball;
    let stream: Readable;
    try {
      stream = (await this.docker.importImage(source, {
        repo,
        tag: tag ?? "latest",
        ...(opts.changes?.length ? { changes: [...opts.changes] } : {}),
      })) as Readable;
    } catch (err) {
      throw toContainerError(err, "import", `importing a rootfs as ${target}`);
    }
    await followProgress(stream, "import", `importing a rootfs as ${target}`, opts.signal);
    const info = await this.inspectImage(target);
    if (!info) throw new ContainerError("import", `importing a rootfs as ${target}: no image came out`);
    return info.id;
  }

  /** Remove an image (its name or id); absent is fine. */
  async removeImage(ref: string, opts: { force?: boolean } = {}): Promise<void> {
    try {
      await this.docker.getImage(ref).remove({ force: opts.force ?? false });
    } catch (err) {
      const e = toContainerError(err, "runtime", `removing image ${ref}`);
      if (e.failure !== "not_found") throw e;
    }
  }
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}
