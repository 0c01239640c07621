/**
 * Build every image the stack references, offline, with the local dockerd (`docker build --network none`: nothing
 * can be pulled here, so each build context is staged from this machine):
 *
 * - `base`: a Debian bookworm minbase rootfs (`/var/lib/efbase-rootfs` when present, else debootstrapped) imported
 *   with `docker import`;
 * - `runtime`: base + Node + the compiled CLI (`npm run build`) + production dependencies only, chosen from the
 *   lockfile (no CDK, no harness CLIs, no dev tools) + the task library;
 * - `actors`, `gateway`, `eval-worker` over the runtime; `nats` over the base;
 * - `harness`: one thin layer over an instance image, adding the runtime's /opt/evalfleet and the harness CLIs.
 *
 * Each image is pushed to the registry and referenced by digest. The last stdout line is one JSON object:
 * `{"ok":true,"registry":…,"images":{"actors":{"ref":"…@sha256:…","digest":"sha256:…","sizeBytes":…},…}}`,
 * which `npx cdk synth -c images='{"actors":"sha256:…",…}'` and the rehearsal read.
 *
 *   npx tsx deploy/images/build.ts [--registry 127.0.0.1:5000] [--instance REF@sha256:…] [--library DIR]
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { cp, mkdir, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { loadImageBuildSettings } from "../../config/index.js";
import { ContainerRuntime } from "../../containers/index.js";
import { debootstrapRootfs, ensureBaseImage } from "../../images/base.js";
import {
  closure,
  copyPackages,
  type Lock,
  linkBins,
  productionPackages,
  readLock,
} from "../../images/packages.js";

const pexec = promisify(execFile);
export const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const HERE = path.join(REPO, "deploy", "images");
/** The harness CLIs: dev dependencies of the checkout, installed only into the harness layer. */
export const HARNESS_CLIS = ["@anthropic-ai/claude-code", "@openai/codex"] as const;
export const SERVICE_IMAGES = ["actors", "gateway", "eval-worker", "nats"] as const;

export interface BuiltImage {
  /** `registry/evalfleet/<name>@sha256:…` */
  ref: string;
  digest: string;
  sizeBytes: number;
}

export interface BuildOptions {
  rt: ContainerRuntime;
  /** The offline base (images/base.ts: Debian minbase + node + git/python), by reference. */
  base: string;
  registry: string;
  /** The instance image the harness layer goes over (by digest); default: the base, pushed as a stand-in. */
  instance?: string;
  library: string;
  log?: (line: string) => void;
}

async function dockerBuild(
  dockerfile: string,
  context: string,
  tag: string,
  args: Record<string, string>,
  opts: BuildOptions,
): Promise<void> {
  opts.log?.(`building ${tag}`);
  await cp(dockerfile, path.join(context, "Dockerfile"));
  await opts.rt.build(context, { tag, dockerfile: "Dockerfile", network: "none", buildArgs: args });
}

/** Push and return the registry's digest for the image (what task definitions pin). */
export async function pushImage(tag: string, repoName: string, opts: BuildOptions): Promise<BuiltImage> {
  const remote = `${opts.registry}/${repoName}:latest`;
  await opts.rt.tag(tag, remote);
  const digest = await opts.rt.push(remote);
  const info = await opts.rt.inspectImage(remote);
  return { ref: `${opts.registry}/${repoName}@${digest}`, digest, sizeBytes: info?.sizeBytes ?? 0 };
}

/** Stage the runtime context: node, the compiled app with its production dependencies, the task library. */
async function stageRuntime(ctx: string, lock: Lock, opts: BuildOptions): Promise<number> {
  const dist = path.join(REPO, "dist");
  if (!existsSync(path.join(dist, "cli", "main.js")))
    throw new Error("dist/cli/main.js is missing: run `npm run build` first");
  await rm(ctx, { recursive: true, force: true });
  await mkdir(ctx, { recursive: true });
  await cp(process.execPath, path.join(ctx, "node"));
  await cp(dist, path.join(ctx, "app"), { recursive: true });
  await cp(path.join(REPO, "package-lock.json"), path.join(ctx, "app", "package-lock.json"));
  const n = await copyPackages(REPO, productionPackages(lock), path.join(ctx, "app"));
  await cp(opts.library, path.join(ctx, "library"), { recursive: true });
  return n;
}

async function which(bin: string): Promise<string> {
  const { stdout } = await pexec("sh", ["-c", `command -v ${bin} || ls /usr/sbin/${bin}`]);
  return stdout.trim().split("\n")[0]!;
}

export async function buildAll(opts: BuildOptions): Promise<Record<string, BuiltImage>> {
  const lock = await readLock(REPO);
  const build = path.join(REPO, ".build", "images");

  const runtimeCtx = path.join(build, "runtime");
  const packages = await stageRuntime(runtimeCtx, lock, opts);
  opts.log?.(`runtime context: ${packages} production packages`);
  const runtimeTag = "evalfleet/runtime:local";
  await dockerBuild(
    path.join(HERE, "runtime.Dockerfile"),
    runtimeCtx,
    runtimeTag,
    { BASE_IMAGE: opts.base },
    opts,
  );

  const images: Record<string, BuiltImage> = {};
  const small = path.join(build, "small");
  await rm(small, { recursive: true, force: true });
  await mkdir(small, { recursive: true });
  await cp(await which("docker"), path.join(small, "docker"));
  await cp(await which("nats-server"), path.join(small, "nats-server"));
  for (const name of SERVICE_IMAGES) {
    const tag = `evalfleet/${name}:local`;
    const args: Record<string, string> =
      name === "nats" ? { BASE_IMAGE: opts.base } : { RUNTIME_IMAGE: runtimeTag };
    await dockerBuild(path.join(HERE, `${name}.Dockerfile`), small, tag, args, opts);
    images[name] = await pushImage(tag, `evalfleet/${name}`, opts);
  }

  // The harness layer, over an instance image pinned by digest (the base itself stands in when none is given).
  const instance = opts.instance ?? (await pushImage(opts.base, "evalfleet/instances", opts)).ref;
  const toolsCtx = path.join(build, "harness");
  await rm(toolsCtx, { recursive: true, force: true });
  const tools = closure(lock, HARNESS_CLIS);
  await copyPackages(REPO, tools, path.join(toolsCtx, "tools"));
  await linkBins(lock, tools, path.join(toolsCtx, "tools"));
  await dockerBuild(
    path.join(HERE, "harness.Dockerfile"),
    toolsCtx,
    "evalfleet/harness:local",
    { RUNTIME_IMAGE: runtimeTag, BASE_IMAGE: instance },
    opts,
  );
  images.harness = await pushImage("evalfleet/harness:local", "evalfleet/harness", opts);
  for (const [name, img] of Object.entries(images)) await smoke(name, img.ref, opts);
  return images;
}

/**
 * What each image must do when run as the stack runs it (by digest, no network): answer its command, and carry no
 * development dependency. A failing check fails the build.
 */
export const SMOKE: Record<string, { args: string[]; expect: RegExp; entrypoint?: string }> = {
  actors: { args: ["actor", "--help"], expect: /grader-supervisor/ },
  gateway: { args: ["gateway", "--help"], expect: /gateway/i },
  "eval-worker": { args: ["eval-worker", "--help"], expect: /docker/i },
  nats: { args: ["--version"], expect: /nats-server: v2\./ },
  harness: { args: ["task", "--help"], expect: /task/i },
};
const DEV_ONLY = ["tsx", "typescript", "aws-cdk-lib", "aws-cdk", "cdk-nag", "constructs", "@biomejs/biome"];

async function inImage(
  ref: string,
  args: string[],
  opts: BuildOptions,
  entrypoint?: string,
): Promise<string> {
  const r = await opts.rt.run(
    { image: ref, command: args, ...(entrypoint ? { entrypoint: [entrypoint] } : {}) },
    { timeoutMs: 120_000 },
  );
  if (r.exitCode !== 0)
    throw new Error(`smoke: ${ref} ${args.join(" ")} exited ${r.exitCode}: ${r.combined.slice(-1000)}`);
  return r.stdout;
}

async function smoke(name: string, ref: string, opts: BuildOptions): Promise<void> {
  const check = SMOKE[name];
  if (!check) return;
  const out = await inImage(ref, check.args, opts);
  if (!check.expect.test(out))
    throw new Error(`smoke: ${name} ${check.args.join(" ")} printed ${out.slice(0, 400)}`);
  if (name === "nats") return;
  const probe = DEV_ONLY.map((p) => `/opt/evalfleet/app/node_modules/${p}`).join(" ");
  const found = await inImage(
    ref,
    ["-c", `for p in ${probe}; do [ -e "$p" ] && echo "$p"; done; true`],
    opts,
    "/bin/sh",
  );
  if (found.trim()) throw new Error(`smoke: ${name} carries development dependencies:\n${found}`);
  if (name !== "harness") {
    const tools = await inImage(
      ref,
      [
        "-c",
        "ls /opt/evalfleet/app/node_modules/.bin 2>/dev/null; ls -d /opt/evalfleet/app/node_modules/@anthropic-ai/claude-code /opt/evalfleet/app/node_modules/@openai/codex 2>/dev/null; true",
      ],
      opts,
      "/bin/sh",
    );
    if (tools.trim())
      throw new Error(
        `smoke: ${name} carries harness CLIs (they belong in the harness layer only):\n${tools}`,
      );
  }
  opts.log?.(`smoke: ${name} ok`);
}

function flag(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
}

/**
 * The base from the machine's rootfs (EVALFLEET_BASE_ROOTFS; copied, never modified), or one debootstrapped into
 * .build/rootfs.
 */
export async function baseImage(
  rt: ContainerRuntime,
  rootfs: string,
  log?: (line: string) => void,
): Promise<string> {
  let rootfsDir = rootfs;
  if (!existsSync(path.join(rootfsDir, "var", "lib", "dpkg", "status"))) {
    rootfsDir = path.join(REPO, ".build", "rootfs");
    if (!existsSync(path.join(rootfsDir, "var", "lib", "dpkg", "status"))) {
      log?.(`debootstrapping a bookworm minbase into ${rootfsDir} (about a minute)`);
      await debootstrapRootfs(rootfsDir);
    }
  }
  return (await ensureBaseImage(rt, { rootfsDir })).ref;
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const registry = flag(argv, "--registry") ?? "127.0.0.1:5000";
  const instance = flag(argv, "--instance");
  const library = path.resolve(flag(argv, "--library") ?? path.join(REPO, "examples", "tasks"));
  const started = Date.now();
  const log = (line: string) => process.stderr.write(`build: ${line}\n`);
  const settings = loadImageBuildSettings();
  const rt = await ContainerRuntime.connect({ env: settings.host.inheritedEnv });
  const images = await buildAll({
    rt,
    base: await baseImage(rt, settings.images.baseRootfs, log),
    registry,
    ...(instance ? { instance } : {}),
    library,
    log,
  });
  for (const [name, img] of Object.entries(images))
    process.stdout.write(`${name.padEnd(12)} ${img.ref}  ${(img.sizeBytes / 1e6).toFixed(0)} MB\n`);
  process.stdout.write(
    `${JSON.stringify({ ok: true, registry, seconds: (Date.now() - started) / 1000, images })}\n`,
  );
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err: unknown) => {
    process.stderr.write(`build: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  });
}

export async function writeDigests(file: string, images: Record<string, BuiltImage>): Promise<void> {
  await writeFile(
    file,
    `${JSON.stringify(Object.fromEntries(Object.entries(images).map(([k, v]) => [k, v.digest])))}\n`,
  );
}
