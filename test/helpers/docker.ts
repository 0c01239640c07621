/**
 * The container runtime, registry and base image the tests use, found or started once per machine:
 *
 * - Docker API: DOCKER_HOST when set (it must answer), else the default sockets; when none answers and we are
 *   root with `dockerd` installed, a private daemon (`--bridge=none --iptables=false --ip6tables=false`, its own
 *   data-root and exec-root) is started under STATE_DIR and left running for the next test files.
 * - Registry: EVALFLEET_TEST_REGISTRY (`127.0.0.1:PORT`, as .ci/run exports), else a `docker-registry` started on
 *   a free loopback port under STATE_DIR, likewise shared.
 * - Base rootfs: EVALFLEET_BASE_ROOTFS, else /var/lib/efbase-rootfs outside CI, else one debootstrapped once
 *   into STATE_DIR (≈ 60 s). The base image built from it lives in the daemon, so later files find it.
 *
 * Concurrent test files serialise the starting through a lock directory. Stop what was started with
 * `kill $(cat /tmp/evalfleet-test-docker/dockerd.pid) $(cat /tmp/evalfleet-test-docker/registry.pid)`.
 */
import { spawn } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { ContainerRuntime } from "../../containers/index.js";
import {
  type BaseImage,
  debootstrapRootfs,
  ensureBaseImage,
  pathExists as exists,
} from "../../images/base.js";

export const STATE_DIR = "/tmp/evalfleet-test-docker";
const DEV_ROOTFS = "/var/lib/efbase-rootfs";

/** Run `fn` holding a machine-wide lock (a directory; a holder that died is noticed by its pid). */
async function withLock<T>(name: string, fn: () => Promise<T>): Promise<T> {
  await mkdir(STATE_DIR, { recursive: true });
  const lock = path.join(STATE_DIR, `${name}.lock`);
  for (;;) {
    try {
      await mkdir(lock);
      await writeFile(path.join(lock, "pid"), String(process.pid));
      break;
    } catch {
      const pid = Number(await readFile(path.join(lock, "pid"), "utf8").catch(() => "0"));
      let alive = pid > 0;
      if (alive) {
        try {
          process.kill(pid, 0);
        } catch {
          alive = false;
        }
      }
      if (!alive && pid > 0) await rm(lock, { recursive: true, force: true });
      else await delay(250);
    }
  }
  try {
    return await fn();
  } finally {
    await rm(lock, { recursive: true, force: true });
  }
}

function startDetached(cmd: string, args: string[], logFile: string): number {
  const fd = openSync(logFile, "a");
  const child = spawn(cmd, args, { detached: true, stdio: ["ignore", fd, fd] });
  closeSync(fd);
  child.unref();
  if (child.pid === undefined) throw new Error(`cannot start ${cmd}`);
  return child.pid;
}

async function waitFor<T>(what: string, ms: number, probe: () => Promise<T | null>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== null) return v;
    if (Date.now() > deadline) throw new Error(`${what} did not come up within ${ms / 1000} s`);
    await delay(200);
  }
}

let runtimeOnce: Promise<{ runtime: ContainerRuntime; dockerHost: string }> | undefined;

/** The runtime the tests use, and the DOCKER_HOST value that reaches it (for child processes). */
export function testRuntime(): Promise<{ runtime: ContainerRuntime; dockerHost: string }> {
  runtimeOnce ??= findOrStartDaemon();
  return runtimeOnce;
}

async function findOrStartDaemon(): Promise<{ runtime: ContainerRuntime; dockerHost: string }> {
  if (process.env.DOCKER_HOST) {
    const runtime = await ContainerRuntime.connect({ env: process.env });
    return { runtime, dockerHost: process.env.DOCKER_HOST };
  }
  const found = await ContainerRuntime.probe({ env: process.env });
  if (found.ok) return { runtime: found.runtime, dockerHost: found.runtime.info.endpoint };
  const socket = path.join(STATE_DIR, "docker.sock");
  const dockerHost = `unix://${socket}`;
  const env = { ...process.env, DOCKER_HOST: dockerHost };
  const again = await ContainerRuntime.probe({ env });
  if (again.ok) return { runtime: again.runtime, dockerHost };
  if (process.getuid?.() !== 0 || !(await exists("/usr/sbin/dockerd"))) {
    throw new Error(
      `${found.reason}. The container tests need a Docker API: run them as root with Debian's docker.io installed (they start a private dockerd), or set DOCKER_HOST`,
    );
  }
  return withLock("dockerd", async () => {
    const probe = await ContainerRuntime.probe({ env });
    if (probe.ok) return { runtime: probe.runtime, dockerHost };
    await rm(socket, { force: true });
    const pid = startDetached(
      "/usr/sbin/dockerd",
      [
        "--bridge=none",
        "--iptables=false",
        "--ip6tables=false",
        `--data-root=${path.join(STATE_DIR, "data")}`,
        `--exec-root=${path.join(STATE_DIR, "exec")}`,
        `--pidfile=${path.join(STATE_DIR, "dockerd.pid")}`,
        "-H",
        dockerHost,
      ],
      path.join(STATE_DIR, "dockerd.log"),
    );
    const runtime = await waitFor(`dockerd (pid ${pid}, log ${STATE_DIR}/dockerd.log)`, 60_000, async () => {
      const p = await ContainerRuntime.probe({ env, pingTimeoutMs: 1000 });
      return p.ok ? p.runtime : null;
    });
    return { runtime, dockerHost };
  });
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

async function registryAnswers(addr: string): Promise<boolean> {
  try {
    const r = await fetch(`http://${addr}/v2/`, { signal: AbortSignal.timeout(2000) });
    return r.status === 200 || r.status === 401;
  } catch {
    return false;
  }
}

let registryOnce: Promise<string> | undefined;

/** `127.0.0.1:PORT` of a registry the test daemon can push to (loopback registries need no TLS). */
export function testRegistry(): Promise<string> {
  registryOnce ??= findOrStartRegistry();
  return registryOnce;
}

async function findOrStartRegistry(): Promise<string> {
  const given = process.env.EVALFLEET_TEST_REGISTRY;
  if (given) {
    if (!(await registryAnswers(given))) {
      throw new Error(
        `EVALFLEET_TEST_REGISTRY=${given} does not answer /v2/: start it or unset the variable`,
      );
    }
    return given;
  }
  const stateFile = path.join(STATE_DIR, "registry.addr");
  const known = await readFile(stateFile, "utf8").catch(() => "");
  if (known && (await registryAnswers(known.trim()))) return known.trim();
  return withLock("registry", async () => {
    const again = await readFile(stateFile, "utf8").catch(() => "");
    if (again && (await registryAnswers(again.trim()))) return again.trim();
    const addr = `127.0.0.1:${await freePort()}`;
    const config = path.join(STATE_DIR, "registry.yml");
    await writeFile(
      config,
      [
        "version: 0.1",
        "storage:",
        "  filesystem:",
        `    rootdirectory: ${path.join(STATE_DIR, "registry")}`,
        "  delete:",
        "    enabled: true",
        "http:",
        `  addr: ${addr}`,
        "",
      ].join("\n"),
    );
    const pid = startDetached("docker-registry", ["serve", config], path.join(STATE_DIR, "registry.log"));
    await writeFile(path.join(STATE_DIR, "registry.pid"), String(pid));
    await waitFor(`docker-registry (log ${STATE_DIR}/registry.log)`, 30_000, async () =>
      (await registryAnswers(addr)) ? true : null,
    );
    await writeFile(stateFile, addr);
    return addr;
  });
}

/** The rootfs folder the base image is built from (see the header for the order). */
export async function testRootfs(): Promise<string> {
  if (process.env.EVALFLEET_BASE_ROOTFS) return process.env.EVALFLEET_BASE_ROOTFS;
  if (!process.env.CI && (await exists(path.join(DEV_ROOTFS, "var/lib/dpkg/status")))) return DEV_ROOTFS;
  const dir = path.join(STATE_DIR, "rootfs");
  const done = path.join(STATE_DIR, "rootfs.done");
  if (await exists(done)) return dir;
  return withLock("rootfs", async () => {
    if (await exists(done)) return dir;
    await rm(dir, { recursive: true, force: true });
    await debootstrapRootfs(dir);
    await writeFile(done, new Date().toISOString());
    return dir;
  });
}

let baseOnce: Promise<BaseImage> | undefined;

/** The evalfleet base image (Debian + node + a grading user), built at most once per daemon. */
export function testBaseImage(): Promise<BaseImage> {
  baseOnce ??= (async () => {
    const { runtime } = await testRuntime();
    const rootfsDir = await testRootfs();
    // Serialised: two files building the same base at once would both import 400 MB.
    return withLock("base-image", () => ensureBaseImage(runtime, { rootfsDir }));
  })();
  return baseOnce;
}

/** True when the file exists and is a unix socket (for mount tests). */
export async function isSocket(p: string): Promise<boolean> {
  try {
    return (await stat(p)).isSocket();
  } catch {
    return false;
  }
}

/**
 * A registry of its own for one test file (stands in for a remote one, e.g. where the official SWE-bench images
 * live): `docker-registry` on a free loopback port with a temp store. Stop it (and remove its store) when done.
 */
export async function startScratchRegistry(): Promise<{ addr: string; stop(): Promise<void> }> {
  const dir = await mkdtemp(path.join(tmpdir(), "ef-scratch-registry-"));
  const addr = `127.0.0.1:${await freePort()}`;
  const config = path.join(dir, "registry.yml");
  await writeFile(
    config,
    [
      "version: 0.1",
      "storage:",
      "  filesystem:",
      `    rootdirectory: ${path.join(dir, "data")}`,
      "http:",
      `  addr: ${addr}`,
      "",
    ].join("\n"),
  );
  const child = spawn("docker-registry", ["serve", config], { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr.on("data", (b: Buffer) => {
    stderr = (stderr + b.toString()).slice(-4000);
  });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  try {
    await waitFor(`docker-registry on ${addr}`, 30_000, async () =>
      (await registryAnswers(addr)) ? true : null,
    );
  } catch (err) {
    child.kill("SIGKILL");
    throw new Error(`${(err as Error).message}: ${stderr}`);
  }
  return {
    addr,
    async stop() {
      child.kill("SIGTERM");
      await exited;
      await rm(dir, { recursive: true, force: true });
    },
  };
}
