/**
 * Can the plane write? JetStream's storage full is the one condition that stops every actor at once while reads
 * still work, so the commands that show the plane (`status`) ask by writing: a probe key put and deleted in the
 * `progress` bucket. With the account's usage beside it, a user sees why nothing moves and how much is stored.
 */
import { hostname } from "node:os";
import { isStorageFull, toEvalfleetError } from "../protocol/errors.js";
import type { Plane } from "./connect.js";

export interface StorageHealth {
  /** a write got through */
  writable: boolean;
  /** JetStream refused it for lack of room */
  full: boolean;
  /** bytes the account stores in JetStream, when the server says */
  storedBytes: number | null;
  /** the refusal, or what else went wrong, in words */
  detail: string | null;
}

export async function storageHealth(plane: Plane): Promise<StorageHealth> {
  let storedBytes: number | null = null;
  try {
    storedBytes = (await plane.jsm.getAccountInfo()).storage;
  } catch {
    // a user without the account-info permission still learns whether writes go through
  }
  const key = `health.${hostname().replace(/[^A-Za-z0-9_-]/g, "_")}.${process.pid}`;
  try {
    await plane.kv.progress.put(key, String(Date.now()));
    await plane.kv.progress.purge(key);
    return { writable: true, full: false, storedBytes, detail: null };
  } catch (err) {
    return { writable: false, full: isStorageFull(err), storedBytes, detail: toEvalfleetError(err).message };
  }
}
