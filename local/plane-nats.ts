import { join } from "node:path";
import { type NatsSettings, natsAt } from "../config/index.js";
import {
  liveOwner,
  lockHolder,
  type OwnerLockBase,
  rewriteOwnerLock,
  takeOwnerLock,
} from "../lib/owner-lock.js";
import { ErrorCode, EvalfleetError } from "../protocol/errors.js";

/*
 * A local plane's NATS, recorded the way the embedded database's owner records its URL (store/embedded.ts):
 * `<state-dir>/nats.lock` holds the pid and command of the process that owns the state folder's NATS store and
 * the URL it is served on. `up` / `start` take it before starting their nats-server (or while using the one
 * NATS_URL names); every other command without NATS_URL connects to the recorded URL, and `report --export`
 * starts a nats-server on the store only when no process holds it — never a second server on a live store.
 */

/** What `<state-dir>/nats.lock` holds. */
export interface PlaneNatsLock extends OwnerLockBase {
  /** true when the holder runs its own nats-server on `<state-dir>/nats/store` */
  own: boolean;
  stateDir: string;
  startedAt: string;
}

export function natsLockPath(stateDir: string): string {
  return join(stateDir, "nats.lock");
}

/** A claim on the state folder's NATS: publish the URL once it is served; release it when stopped. */
export interface PlaneNatsClaim {
  publish(url: string, own: boolean): Promise<void>;
  release(): Promise<void>;
}

function held(holder: OwnerLockBase, stateDir: string, wanted: string): EvalfleetError {
  const where = holder.url ? ` serving ${holder.url}` : " (starting)";
  return new EvalfleetError(
    ErrorCode.Conflict,
    `the NATS store under ${stateDir} is in use by \`evalfleet ${holder.command}\` (pid ${holder.pid})${where}; ` +
      `two nats-servers must not share one store. To run ${wanted} as well, stop that process first, or give ` +
      "this one its own --state-dir (or NATS_URL). Commands such as watch, dashboard and report connect to it on their own.",
  );
}

/** Take `<state-dir>/nats.lock` for `command`, or fail with who holds it. */
export async function claimPlaneNats(stateDir: string, command: string): Promise<PlaneNatsClaim> {
  const path = natsLockPath(stateDir);
  const info: PlaneNatsLock = {
    pid: process.pid,
    command,
    url: null,
    own: false,
    stateDir,
    startedAt: new Date().toISOString(),
  };
  const release = await takeOwnerLock(path, info, (h) => held(h, stateDir, `\`evalfleet ${command}\``));
  return {
    publish: (url, own) => rewriteOwnerLock(path, { ...info, url, own }),
    release,
  };
}

/** The live process holding the state folder's NATS, if any. */
export async function livePlaneNats(stateDir: string): Promise<PlaneNatsLock | null> {
  const v = await liveOwner(natsLockPath(stateDir));
  if (!v) return null;
  return { ...lockHolder(v), own: v.own === true, stateDir };
}

/**
 * The NATS a command on this machine connects to: NATS_URL when given; else the URL a live `up` / `start`
 * recorded under the state folder; else the default (nats://127.0.0.1:4222).
 */
export async function planeNats(s: { nats: NatsSettings; state: { dir: string } }): Promise<NatsSettings> {
  if (s.nats.configured) return s.nats;
  const holder = await livePlaneNats(s.state.dir);
  if (!holder?.url) return s.nats;
  return { ...natsAt(holder.url), auth: s.nats.auth, ...(s.nats.tls ? { tls: s.nats.tls } : {}) };
}
