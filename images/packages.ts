/**
 * Staging npm packages into an image build context from the checkout's node_modules, chosen by the lockfile: no
 * build can reach a registry, so what an image needs is copied from what `npm ci` installed here. Used by the
 * stack images (deploy/images/build.ts) and the harness layer of attempt sandboxes (images/harness.ts).
 */
import { existsSync } from "node:fs";
import { cp, mkdir, readFile, symlink } from "node:fs/promises";
import path from "node:path";

export interface LockPackage {
  dev?: boolean;
  optional?: boolean;
  link?: boolean;
  bin?: Record<string, string> | string;
  name?: string;
  version?: string;
  integrity?: string;
  dependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
}
export type Lock = { packages: Record<string, LockPackage> };

export async function readLock(repo: string): Promise<Lock> {
  return JSON.parse(await readFile(path.join(repo, "package-lock.json"), "utf8")) as Lock;
}

/** Lockfile paths of every production package (those npm would keep with `--omit=dev`). */
export function productionPackages(lock: Lock): string[] {
  return Object.entries(lock.packages)
    .filter(([k, v]) => k.startsWith("node_modules/") && !v.dev && !v.link)
    .map(([k]) => k);
}

/** Resolve `name` from the package at `from` as Node would: nearest node_modules walking up. */
function resolveIn(lock: Lock, from: string, name: string): string | undefined {
  let dir = from;
  for (;;) {
    const candidate = `${dir ? `${dir}/` : ""}node_modules/${name}`;
    if (lock.packages[candidate]) return candidate;
    if (!dir) return undefined;
    const i = dir.lastIndexOf("/node_modules/");
    dir = i < 0 ? "" : dir.slice(0, i);
  }
}

/** The named packages and everything they depend on (optional dependencies included when installed). */
export function closure(lock: Lock, roots: readonly string[]): string[] {
  const seen = new Set<string>();
  const queue = roots.map((r) => `node_modules/${r}`);
  while (queue.length > 0) {
    const key = queue.pop()!;
    if (seen.has(key) || !lock.packages[key]) continue;
    seen.add(key);
    const p = lock.packages[key]!;
    for (const dep of Object.keys({ ...p.dependencies, ...p.optionalDependencies })) {
      const r = resolveIn(lock, key, dep);
      if (r) queue.push(r);
    }
  }
  return [...seen].sort();
}

/** Copy lockfile packages from the checkout's node_modules; nested node_modules only where listed themselves. */
export async function copyPackages(repo: string, keys: string[], dest: string): Promise<number> {
  let copied = 0;
  for (const key of keys) {
    const src = path.join(repo, key);
    if (!existsSync(src)) continue; // an optional dependency for another platform
    const nested = path.join(src, "node_modules");
    await cp(src, path.join(dest, key), {
      recursive: true,
      verbatimSymlinks: true,
      filter: (s) => s !== nested && !s.startsWith(`${nested}${path.sep}`),
    });
    copied++;
  }
  return copied;
}

export async function linkBins(lock: Lock, keys: string[], dest: string): Promise<void> {
  const binDir = path.join(dest, "node_modules", ".bin");
  await mkdir(binDir, { recursive: true });
  for (const key of keys) {
    const p = lock.packages[key]!;
    if (!p.bin || key.lastIndexOf("node_modules/") !== 0) continue;
    const name = key.slice("node_modules/".length);
    const bins = typeof p.bin === "string" ? { [name.split("/").pop()!]: p.bin } : p.bin;
    for (const [bin, target] of Object.entries(bins))
      await symlink(path.join("..", name, target), path.join(binDir, bin));
  }
}
