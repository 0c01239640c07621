import { link, mkdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { createConnection } from "node:net";
import { dirname } from "node:path";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";

/*
 * A file that says which process owns something on this machine (the embedded database's folder, a local plane's
 * nats-server): created atomically with the owner's pid and whatever it serves, read by every other process. A
 * lock whose process is gone, or whose served address no longer answers, is stale and may be taken over.
 */

/** What every owner lock holds; each kind adds its own fields. */
export interface OwnerLockBase {
  pid: number;
  command: string;
  /** where the owner serves what it owns; null when it does not (or not yet) */
  url: string | null;
}

/** The lock's content, if it parses and names a pid and a command. */
export async function readOwnerLock(path: string): Promise<(OwnerLockBase & Record<string, unknown>) | null> {
  try {
    const v = JSON.parse(await readFile(path, "utf8")) as Record<string, unknown>;
    if (typeof v.pid !== "number" || typeof v.command !== "string") return null;
    return { ...v, pid: v.pid, command: v.command, url: typeof v.url === "string" ? v.url : null };
  } catch {
    return null;
  }
}

/** The fields every owner lock has, from a lock as read (startedAt empty when the lock did not say). */
export function lockHolder(
  v: OwnerLockBase & Record<string, unknown>,
): OwnerLockBase & { startedAt: string } {
  return { pid: v.pid, command: v.command, url: v.url, startedAt: String(v.startedAt ?? "") };
}

export function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Does something accept TCP connections at this URL's host and port (within 2 s)? */
export function tcpAnswers(url: string): Promise<boolean> {
  const u = new URL(url);
  return new Promise((resolve) => {
    const s = createConnection({ host: u.hostname, port: Number(u.port) });
    s.setTimeout(2_000);
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
    s.once("timeout", () => {
      s.destroy();
      resolve(false);
    });
  });
}

/** The lock's holder if it is another live process (a served lock whose port no longer answers is stale). */
export async function liveOwner(path: string): Promise<(OwnerLockBase & Record<string, unknown>) | null> {
  const cur = await readOwnerLock(path);
  if (!cur || cur.pid === process.pid || !processAlive(cur.pid)) return null;
  if (cur.url && !(await tcpAnswers(cur.url))) return null;
  return cur;
}

/**
 * Take the lock at `path` with `body`, or throw `held(holder)` when another live process holds it. Returns the
 * release function (which removes the lock only while it is still ours).
 */
export async function takeOwnerLock<T extends OwnerLockBase>(
  path: string,
  body: T,
  held: (holder: OwnerLockBase & Record<string, unknown>) => Error,
): Promise<() => Promise<void>> {
  await mkdir(dirname(path), { recursive: true });
  const text = `${JSON.stringify(body)}\n`;
  for (let tries = 0; tries < 5; tries++) {
    const tmp = `${path}.${process.pid}.${tries}.tmp`;
    await writeFile(tmp, text);
    try {
      // link() creates the lock with its whole content or not at all; no reader sees a half-written lock.
      await link(tmp, path);
      await rm(tmp, { force: true });
      return async () => {
        const now = await readOwnerLock(path);
        if (now?.pid === process.pid) await rm(path, { force: true });
      };
    } catch (err) {
      await rm(tmp, { force: true });
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    const holder = await liveOwner(path);
    if (holder) throw held(holder);
    // Stale: move it aside under a name of our own, so two processes breaking it at once cannot both win.
    const aside = `${path}.stale.${process.pid}`;
    await rename(path, aside).catch(() => undefined);
    await rm(aside, { force: true });
  }
  throw new EvalfleetError(
    ErrorCode.Conflict,
    `could not take the lock ${path}: other processes keep taking it. Stop them, or remove the file if none runs.`,
  );
}

/** Rewrite a lock this process holds (same pid, so it stays ours); a reader racing the rewrite sees either version. */
export async function rewriteOwnerLock<T extends OwnerLockBase>(path: string, body: T): Promise<void> {
  const tmp = `${path}.${process.pid}.rewrite.tmp`;
  await writeFile(tmp, `${JSON.stringify(body)}\n`);
  await rename(tmp, path);
}
