/**
 * The image an attempt's harness runs in: the task's instance image (its repository environment: a SWE-bench
 * image by digest, or the offline base for tasks shipped as folders) plus one harness layer under /opt/evalfleet —
 * Node, the harness CLIs at the lockfile's versions (`@anthropic-ai/claude-code`, `@openai/codex`, `opencode-ai`),
 * the built-in reference agent, and the container's init (harness-layer/init.mjs, which serves the shim on
 * 127.0.0.1 inside). Built offline (`docker build --network none`): the layer is staged from this checkout's
 * node_modules, built once as an image of its own (`evalfleet/harness-layer:<content hash>`) and copied over each
 * instance image (`evalfleet/harness:<hash of both>`), both referenced by image id (their content digest), never by
 * a tag. Nothing in the instance's own environment changes, and the layer holds no credential of any kind.
 */
import { createHash } from "node:crypto";
import { createReadStream, constants as fsConstants } from "node:fs";
import {
  copyFile,
  mkdir,
  mkdtemp,
  open,
  readdir,
  readFile,
  rm,
  stat,
  unlink,
  writeFile,
} from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { ContainerRuntime } from "../containers/index.js";
import { ContainerError } from "../containers/index.js";
import type { Logger } from "../lib/log.js";
import { silentLogger } from "../lib/log.js";
import { closure, copyPackages, linkBins, readLock } from "./packages.js";

/** Where the layer lives in the image, and what the task names there. */
export const SANDBOX = {
  root: "/opt/evalfleet",
  node: "/opt/evalfleet/bin/node",
  /** node_modules/.bin/<cli> under this folder, as on the host under the checkout */
  app: "/opt/evalfleet/app",
  init: "/opt/evalfleet/init.mjs",
  referenceAgent: "/opt/evalfleet/app/reference-agent.mjs",
} as const;

/** The harness's user in its container: not root, and not the task's (the task holds the credentials). */
export const HARNESS_UID = 10002;
export const HARNESS_CLIS = ["@anthropic-ai/claude-code", "@openai/codex", "opencode-ai"] as const;
export const HARNESS_LAYER_REPO = "evalfleet/harness-layer";
export const HARNESS_REPO = "evalfleet/harness";
export const HARNESS_LAYER_LABEL = "io.evalfleet.harness-layer";
export const HARNESS_INSTANCE_LABEL = "io.evalfleet.instance";

/** The evalfleet checkout this module is part of. */
export const CHECKOUT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const INIT_SOURCE = path.join(CHECKOUT, "images", "harness-layer", "init.mjs");
const REFERENCE_SOURCE = path.join(CHECKOUT, "harnesses", "reference-agent.ts");

export interface HarnessImageOptions {
  /** the checkout whose node_modules and lockfile the layer is staged from (default: this one) */
  repo?: string;
  /** default: this process's node */
  nodeBinary?: string;
  logger?: Logger;
  signal?: AbortSignal;
}

export interface HarnessImage {
  ref: string;
  id: string;
  built: boolean;
}

async function sha256File(file: string): Promise<string> {
  const h = createHash("sha256");
  for await (const chunk of createReadStream(file)) h.update(chunk as Buffer);
  return h.digest("hex");
}

const LAYER_DOCKERFILE = ["FROM scratch", "COPY opt /opt", ""].join("\n");

function harnessDockerfile(instance: string, layer: string): string {
  return [
    `FROM ${instance}`,
    `COPY --from=${layer} ${SANDBOX.root} ${SANDBOX.root}`,
    // A passwd entry for the harness's uid (tools that look their user up), then a check that the layer runs here.
    `RUN (grep -q '^harness:' /etc/passwd || echo 'harness:x:${HARNESS_UID}:${HARNESS_UID}:evalfleet harness:/nonexistent:/bin/sh' >> /etc/passwd)` +
      ` && (grep -q '^harness:' /etc/group || echo 'harness:x:${HARNESS_UID}:' >> /etc/group)` +
      ` && ${SANDBOX.node} --version`,
    "",
  ].join("\n");
}

/** What the layer is made of, hashed: the same checkout and node always give the same layer. */
async function layerIdentity(repo: string, node: string): Promise<{ key: string; packages: string[] }> {
  const lock = await readLock(repo);
  const packages = closure(lock, HARNESS_CLIS);
  const missing = HARNESS_CLIS.filter((c) => !packages.includes(`node_modules/${c}`));
  if (missing.length > 0)
    throw new ContainerError(
      "invalid",
      `the harness layer needs ${missing.join(", ")} in ${repo}/package-lock.json: run npm install`,
    );
  const h = createHash("sha256")
    .update(LAYER_DOCKERFILE)
    .update(await sha256File(node));
  // What the agent's bundle is made of (its settings schema, the wire vocabulary it imports, their packages), read
  // rather than bundled: every task computes this identity, and a bundle per task would cost a second of CPU.
  h.update(await readFile(INIT_SOURCE));
  for (const f of await referenceAgentSources()) h.update(f).update(await readFile(f));
  for (const p of REFERENCE_AGENT_PACKAGES) h.update(`${p}@${lock.packages[p]?.version ?? ""}\n`);
  for (const p of packages) {
    const e = lock.packages[p];
    h.update(`${p}@${e?.version ?? ""}#${e?.integrity ?? ""}\n`);
  }
  return { key: h.digest("hex").slice(0, 16), packages };
}

/** The folders the reference agent's bundle takes sources from, and the packages it takes (esbuild's metafile). */
const REFERENCE_AGENT_DIRS = ["config", "protocol"];
const REFERENCE_AGENT_PACKAGES = ["node_modules/zod", "node_modules/yaml"];

async function referenceAgentSources(): Promise<string[]> {
  const files = [REFERENCE_SOURCE];
  for (const d of REFERENCE_AGENT_DIRS) {
    const dir = path.join(CHECKOUT, d);
    for (const f of (await readdir(dir, { recursive: true })).sort())
      if (f.endsWith(".ts")) files.push(path.join(dir, f));
  }
  return files;
}

/**
 * The reference agent as one plain JavaScript file (the image has no TypeScript loader and none of evalfleet's
 * modules): bundled with what it imports — its settings schema (config/) and their packages (zod, yaml).
 */
async function referenceAgentJs(): Promise<string> {
  const esbuild = await import("esbuild");
  const out = await esbuild.build({
    entryPoints: [REFERENCE_SOURCE],
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    write: false,
    logLevel: "silent",
    // CommonJS packages in the bundle (yaml) require Node's builtins: give the ES module a require to do it with.
    banner: {
      js: 'import { createRequire as __efRequire } from "node:module"; const require = __efRequire(import.meta.url);',
    },
  });
  const js = out.outputFiles[0]?.text;
  if (js === undefined) throw new Error("bundling the reference agent produced nothing");
  return js;
}

/**
 * The layer image, pinned: its image id (`sha256:…`, the digest of its content), found by its content hash or
 * staged and built now (once per machine). Harness images copy from that id, never from a tag that could move.
 */
export async function ensureHarnessLayer(
  rt: ContainerRuntime,
  opts: HarnessImageOptions = {},
): Promise<string> {
  const repo = opts.repo ?? CHECKOUT;
  const node = opts.nodeBinary ?? process.execPath;
  const log = opts.logger ?? silentLogger();
  const { key, packages } = await layerIdentity(repo, node);
  const ref = `${HARNESS_LAYER_REPO}:${key}`;
  const have = await rt.inspectImage(ref);
  if (have) return have.id;
  return withImageLock(ref, async () => {
    const again = await rt.inspectImage(ref);
    if (again) return again.id;
    const ctx = await mkdtemp(path.join(tmpdir(), "evalfleet-harness-layer-"));
    try {
      const root = path.join(ctx, SANDBOX.root.slice(1));
      const app = path.join(ctx, SANDBOX.app.slice(1));
      await mkdir(path.dirname(path.join(ctx, SANDBOX.node.slice(1))), { recursive: true });
      await mkdir(app, { recursive: true });
      await copyFile(node, path.join(ctx, SANDBOX.node.slice(1)));
      await copyFile(INIT_SOURCE, path.join(root, "init.mjs"));
      await writeFile(path.join(ctx, SANDBOX.referenceAgent.slice(1)), await referenceAgentJs());
      await copyPackages(repo, packages, app);
      await linkBins(await readLock(repo), packages, app);
      await writeFile(path.join(ctx, "Dockerfile"), LAYER_DOCKERFILE);
      log.info({ image: ref }, "building the harness layer (node, harness CLIs, reference agent)");
      return await rt.build(ctx, { tag: ref, labels: { [HARNESS_LAYER_LABEL]: key }, ...signalOf(opts) });
    } finally {
      await rm(ctx, { recursive: true, force: true });
    }
  });
}

/**
 * The harness image over `instance` (an image reference the daemon has or can pull; pin SWE-bench images by
 * digest): found by its hash, or built now from the instance and the layer, both by image id. Run it by its `id`.
 */
export async function ensureHarnessImage(
  rt: ContainerRuntime,
  instance: string,
  opts: HarnessImageOptions = {},
): Promise<HarnessImage> {
  const log = opts.logger ?? silentLogger();
  const layer = await ensureHarnessLayer(rt, opts);
  await rt.ensureImage(instance, signalOf(opts));
  const base = await rt.inspectImage(instance);
  if (!base) throw new ContainerError("not_found", `the instance image ${instance} is not in the daemon`);
  // Built FROM the instance's image id and COPY --from the layer's: both pinned by content, whatever tags move.
  const dockerfile = harnessDockerfile(base.id, layer);
  const key = createHash("sha256").update(`${base.id}\n${layer}\n${dockerfile}`).digest("hex").slice(0, 16);
  const ref = `${HARNESS_REPO}:${key}`;
  const have = await rt.inspectImage(ref);
  if (have) return { ref, id: have.id, built: false };
  return withImageLock(ref, async () => {
    const again = await rt.inspectImage(ref);
    if (again) return { ref, id: again.id, built: false };
    const ctx = await mkdtemp(path.join(tmpdir(), "evalfleet-harness-"));
    try {
      await writeFile(path.join(ctx, "Dockerfile"), dockerfile);
      log.info({ image: ref, instance }, "building the harness image");
      const id = await rt.build(ctx, {
        tag: ref,
        labels: { [HARNESS_LAYER_LABEL]: layer, [HARNESS_INSTANCE_LABEL]: instance },
        ...signalOf(opts),
      });
      return { ref, id, built: true };
    } finally {
      await rm(ctx, { recursive: true, force: true });
    }
  });
}

function signalOf(opts: HarnessImageOptions): { signal?: AbortSignal } {
  return opts.signal ? { signal: opts.signal } : {};
}

const LOCK_STALE_MS = 30 * 60_000;

/**
 * One build of an image at a time on this machine: many tasks starting at once for the same new instance must not
 * each build it. A lock file per image (its holder's pid inside); a holder that died, or held it past 30 minutes,
 * no longer counts.
 */
async function withImageLock<T>(ref: string, fn: () => Promise<T>): Promise<T> {
  const dir = path.join(tmpdir(), "evalfleet-image-locks");
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, `${ref.replace(/[^A-Za-z0-9_.-]/g, "_")}.lock`);
  for (;;) {
    try {
      const fh = await open(file, fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_WRONLY, 0o600);
      await fh.writeFile(String(process.pid));
      await fh.close();
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const holder = Number((await readFile(file, "utf8").catch(() => "")).trim());
      const age = Date.now() - ((await stat(file).catch(() => null))?.mtimeMs ?? 0);
      if (!alive(holder) || age > LOCK_STALE_MS) await unlink(file).catch(() => {});
      else await new Promise((r) => setTimeout(r, 500));
    }
  }
  try {
    return await fn();
  } finally {
    await unlink(file).catch(() => {});
  }
}

function alive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
