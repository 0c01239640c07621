/**
 * Storing one attempt's blob under that attempt's NATS user. `@nats-io/obj`'s `put` first reads the object's
 * current metadata through the stream message-get API (the name is in the request body, where no permission can
 * see it — allowing it would let a task read every blob) and names chunks by a random id (no permission could tie
 * them to an attempt). This writes the same wire format — chunks, then the metadata message with a subject
 * roll-up — with the chunk id under the attempt's own prefix, so a per-attempt user can be allowed exactly its own
 * subjects, and every reader (`ObjectStore.get`) reads it as any other object.
 */
import { createHash } from "node:crypto";
import type { JetStreamClient } from "@nats-io/jetstream";
import { headers, nuid } from "@nats-io/transport-node";
import { ApiSubjects } from "../protocol/subjects.js";
import { ObjectStores } from "../protocol/topology.js";

/** The chunk size @nats-io/obj uses by default (bounded by the server's max payload). */
const CHUNK_BYTES = 128 * 1024;

/** Put `data` as object `name` in the blobs store, its chunks under `chunkPrefix` (`ApiSubjects.attemptChunkId`). */
export async function putOwnBlob(
  js: JetStreamClient,
  name: string,
  chunkId: string,
  data: Uint8Array,
  opts: { timeoutMs?: number } = {},
): Promise<void> {
  const store = ObjectStores.blobs.name;
  const chunkSubject = ApiSubjects.objectChunks(store, chunkId);
  const timeout = opts.timeoutMs ?? 10_000;
  let chunks = 0;
  for (let off = 0; off < data.length; off += CHUNK_BYTES) {
    await js.publish(chunkSubject, data.subarray(off, off + CHUNK_BYTES), { timeout });
    chunks++;
  }
  const digest = createHash("sha256").update(data).digest("base64").replace(/\+/g, "-").replace(/\//g, "_");
  const meta = {
    name,
    description: "",
    options: { max_chunk_size: CHUNK_BYTES },
    bucket: store,
    nuid: chunkId,
    size: data.length,
    chunks,
    mtime: new Date().toISOString(),
    digest: `SHA-256=${digest}`,
    deleted: false,
  };
  const h = headers();
  // The metadata subject keeps only its last message, as @nats-io/obj's own put does.
  h.set("Nats-Rollup", "sub");
  await js.publish(ApiSubjects.objectMeta(store, name), JSON.stringify(meta), { headers: h, timeout });
}

/** A fresh chunk id for one attempt's blob. */
export function attemptChunkId(run: string, cell: string, attempt: number): string {
  return ApiSubjects.attemptChunkId(run, cell, attempt, nuid.next());
}
