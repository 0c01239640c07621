import { createHash } from "node:crypto";
import { decodeToken, encodeToken } from "../../../protocol/names.js";
import type { JobRef } from "./types.js";

/** Tag keys every harness task carries: teardown and the nightly guard find a run's tasks by them. */
export const EcsTags = {
  run: "evalfleet:run",
  cell: "evalfleet:cell",
  attempt: "evalfleet:attempt",
  pool: "evalfleet:pool",
} as const;

/**
 * RunTask's clientToken (≤ 64 ASCII chars, case-sensitive): a hash of the attempt's natural key, so a repeated
 * call for the same attempt — from a retry or a second dispatcher — returns the task already started instead of a
 * second one. `generation` > 0 is a deliberate relaunch after the previous task of the attempt stopped.
 */
export function clientTokenFor(ref: JobRef, generation = 0): string {
  const key = [ref.runName, ref.cellId, String(ref.attempt), ...(generation > 0 ? [String(generation)] : [])];
  const digest = createHash("sha256").update(key.join("\u0000")).digest("base64url");
  return `ef1-${digest.slice(0, 43)}`;
}

/**
 * RunTask's `startedBy` for a run (≤ 128 chars of `[A-Za-z0-9_-]`); ListTasks filters on it exactly. Names with
 * other characters are slugged and suffixed with a hash, so two runs never share a value.
 */
export function startedByFor(runName: string): string {
  const slug = runName.replace(/[^A-Za-z0-9_-]/g, "_");
  if (slug === runName && slug.length <= 100) return `evalfleet-${slug}`;
  const h = createHash("sha256").update(runName).digest("hex").slice(0, 12);
  return `evalfleet-${slug.slice(0, 100)}-${h}`;
}

/** ECS's limit on a tag value, in characters. */
export const TAG_VALUE_MAX = 256;

/**
 * A name as tags: token-encoded, so any name fits ECS's tag alphabet and decodes back exactly, and split into
 * `key`, `key.1`, `key.2`… when it is longer than a tag value may be (a cell id joins three 128-character names).
 */
function nameTags(key: string, name: string): Array<{ key: string; value: string }> {
  const encoded = encodeToken(name);
  const out = [{ key, value: encoded.slice(0, TAG_VALUE_MAX) }];
  for (let i = 1; i * TAG_VALUE_MAX < encoded.length; i++)
    out.push({ key: `${key}.${i}`, value: encoded.slice(i * TAG_VALUE_MAX, (i + 1) * TAG_VALUE_MAX) });
  return out;
}

/** Tags for a task: the job reference, so teardown and a restarted dispatcher can find its attempt. */
export function tagsFor(ref: JobRef): Array<{ key: string; value: string }> {
  return [
    ...nameTags(EcsTags.run, ref.runName),
    ...nameTags(EcsTags.cell, ref.cellId),
    { key: EcsTags.attempt, value: String(ref.attempt) },
    ...nameTags(EcsTags.pool, ref.pool),
  ];
}

/** The job reference recorded in a task's tags, if it has one (a dispatcher restarted without memory uses it). */
export function refFromTags(
  tags: Array<{ key?: string | undefined; value?: string | undefined }> | undefined,
): JobRef | undefined {
  const get = (k: string): string | undefined => tags?.find((t) => t.key === k)?.value;
  const name = (k: string): string | undefined => {
    let value = get(k);
    if (value === undefined) return undefined;
    for (let i = 1; get(`${k}.${i}`) !== undefined; i++) value += get(`${k}.${i}`);
    return decodeToken(value);
  };
  const run = name(EcsTags.run);
  const cell = name(EcsTags.cell);
  const attempt = Number(get(EcsTags.attempt));
  const pool = name(EcsTags.pool);
  if (run === undefined || cell === undefined || pool === undefined || !Number.isInteger(attempt))
    return undefined;
  return { runName: run, cellId: cell, attempt, pool };
}

export function refKey(ref: JobRef): string {
  return `${ref.runName}\u0000${ref.cellId}\u0000${ref.attempt}`;
}
