/**
 * The offline base every instance image evalfleet builds starts from: a debootstrapped Debian rootfs imported as an
 * image, plus what a build cannot download — the host's `node` binary (the sample tasks are Node projects) and,
 * when the rootfs lacks it, the host's `patch` (the third command of the official patch-apply chain) — and a
 * non-root user the grader runs as. Named by content, so a base is built once per daemon.
 */
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { access, copyFile, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { ContainerError, type ContainerRuntime } from "../containers/index.js";
import type { Logger } from "../lib/log.js";
import { silentLogger } from "../lib/log.js";

/** The user graded code runs as in evalfleet-built images (the official images run as root). */
export const GRADE_UID = 1000;
export const GRADE_USER = "evalfleet";
/** Image label naming the user grading may run as; images without it are graded as root. */
export const GRADE_USER_LABEL = "io.evalfleet.grade-user";
export const BASE_REPO = "evalfleet/base";
export const ROOTFS_REPO = "evalfleet/rootfs";

/** Packages a debootstrapped base needs (git for /testbed, patch for the apply chain, python3 for pytest tasks). */
export const BASE_PACKAGES = ["git", "patch", "python3", "python3-pytest", "ca-certificates"] as const;

export interface BaseOptions {
  /** A bookworm rootfs folder (read, never modified). */
  rootfsDir: string;
  /** The node binary copied in; default this process's. */
  nodeBinary?: string;
  /** `patch` copied in when the rootfs has none; default /usr/bin/patch. */
  patchBinary?: string;
  logger?: Logger;
  signal?: AbortSignal;
}

export interface BaseImage {
  /** `evalfleet/base:<content hash>`. */
  ref: string;
  id: string;
  built: boolean;
}

/** True when the path can be reached (any kind of file). */
export async function pathExists(p: string): Promise<boolean> {
  try {
    await access(p);
    return true;
  } catch {
    return false;
  }
}

async function sha256File(file: string): Promise<string> {
  const h = createHash("sha256");
  for await (const chunk of createReadStream(file)) h.update(chunk as Buffer);
  return h.digest("hex");
}

/**
 * Identity of a rootfs without hashing 400 MB: its OS release and its dpkg database (every installed package and
 * version). Two rootfs folders with the same packages give the same base.
 */
async function rootfsIdentity(dir: string): Promise<string> {
  const h = createHash("sha256");
  for (const f of ["etc/os-release", "var/lib/dpkg/status"]) {
    try {
      h.update(await readFile(path.join(dir, f)));
    } catch {
      throw new ContainerError(
        "invalid",
        `${dir} is not a Debian rootfs (no ${f}): build one with \`debootstrap --variant=minbase --include=${BASE_PACKAGES.join(",")} bookworm DIR\``,
      );
    }
  }
  return h.digest("hex").slice(0, 16);
}

function baseDockerfile(rootfsRef: string, withPatch: boolean): string {
  return [
    `FROM ${rootfsRef}`,
    "COPY node /usr/local/bin/node",
    ...(withPatch ? ["COPY patch /usr/bin/patch"] : []),
    `RUN groupadd -g ${GRADE_UID} ${GRADE_USER} && useradd -u ${GRADE_UID} -g ${GRADE_UID} -m -s /bin/bash ${GRADE_USER}` +
      " && node --version && git --version",
    "ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin LANG=C.UTF-8",
    "",
  ].join("\n");
}

/** `tar -C dir -c .` streamed into an image import. */
export async function importRootfsDir(
  rt: ContainerRuntime,
  dir: string,
  target: string,
  signal?: AbortSignal,
): Promise<string> {
  const tar = spawn("tar", ["-C", dir, "--numeric-owner", "-c", "."], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  tar.stderr.on("data", (b: Buffer) => {
    stderr += b.toString();
  });
  const exited = new Promise<number | null>((resolve) => tar.on("close", resolve));
  try {
    const id = await rt.importRootfs(tar.stdout, target, { ...(signal ? { signal } : {}) });
    const code = await exited;
    if (code !== 0)
      throw new ContainerError("import", `tar of ${dir} failed (exit ${code}): ${stderr.trim()}`);
    return id;
  } catch (err) {
    tar.kill("SIGKILL");
    throw err;
  }
}

/** The base image for this rootfs, node and patch: found in the daemon, or imported and built now. */
export async function ensureBaseImage(rt: ContainerRuntime, opts: BaseOptions): Promise<BaseImage> {
  const log = opts.logger ?? silentLogger();
  const node = opts.nodeBinary ?? process.execPath;
  const needPatch = !(await pathExists(path.join(opts.rootfsDir, "usr/bin/patch")));
  const patch = opts.patchBinary ?? "/usr/bin/patch";
  if (needPatch && !(await pathExists(patch))) {
    throw new ContainerError(
      "invalid",
      `the rootfs ${opts.rootfsDir} has no patch and neither does this host (${patch}): debootstrap with --include=patch`,
    );
  }
  const rootfsId = await rootfsIdentity(opts.rootfsDir);
  const rootfsRef = `${ROOTFS_REPO}:${rootfsId}`;
  const dockerfile = baseDockerfile(rootfsRef, needPatch);
  const h = createHash("sha256")
    .update(dockerfile)
    .update(await sha256File(node));
  if (needPatch) h.update(await sha256File(patch));
  const ref = `${BASE_REPO}:${rootfsId}-${h.digest("hex").slice(0, 12)}`;
  const have = await rt.inspectImage(ref);
  if (have) return { ref, id: have.id, built: false };

  if (!(await rt.inspectImage(rootfsRef))) {
    log.info({ rootfs: opts.rootfsDir, image: rootfsRef }, "importing the base rootfs");
    await importRootfsDir(rt, opts.rootfsDir, rootfsRef, opts.signal);
  }
  const ctx = await mkdtemp(path.join(tmpdir(), "evalfleet-base-"));
  try {
    await copyFile(node, path.join(ctx, "node"));
    if (needPatch) await copyFile(patch, path.join(ctx, "patch"));
    await writeFile(path.join(ctx, "Dockerfile"), dockerfile);
    log.info({ image: ref }, "building the base image");
    const id = await rt.build(ctx, {
      tag: ref,
      labels: { [GRADE_USER_LABEL]: `${GRADE_UID}:${GRADE_UID}` },
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    return { ref, id, built: true };
  } finally {
    await rm(ctx, { recursive: true, force: true });
  }
}

export interface DebootstrapOptions {
  suite?: string;
  mirror?: string;
  include?: readonly string[];
  logger?: Logger;
}

/** `debootstrap --variant=minbase` into `dir` (≈ 60 s with Debian's mirror reachable); needs root. */
export async function debootstrapRootfs(dir: string, opts: DebootstrapOptions = {}): Promise<void> {
  await mkdir(path.dirname(dir), { recursive: true });
  const args = [
    "--variant=minbase",
    `--include=${(opts.include ?? BASE_PACKAGES).join(",")}`,
    opts.suite ?? "bookworm",
    dir,
    opts.mirror ?? "http://deb.debian.org/debian",
  ];
  const child = spawn("debootstrap", args, { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout.on("data", (b: Buffer) => {
    out = (out + b.toString()).slice(-8000);
  });
  child.stderr.on("data", (b: Buffer) => {
    out = (out + b.toString()).slice(-8000);
  });
  const code = await new Promise<number | null>((resolve) => {
    child.on("error", () => resolve(-1));
    child.on("close", resolve);
  });
  if (code !== 0) {
    throw new ContainerError(
      "build",
      `debootstrap ${args.join(" ")} failed (exit ${code}); it needs root and Debian's mirror:\n${out.trim()}`,
    );
  }
  await stat(path.join(dir, "var/lib/dpkg/status"));
}
