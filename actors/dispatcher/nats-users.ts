/**
 * The NATS user of each attempt (issue 14.2): minted when the dispatcher launches the attempt, signed with the
 * evalfleet account's signing key, allowed only the attempt's own keys and subjects (plane/nats-auth.ts), and
 * expiring with the attempt — its timeout plus a grace for the clone before it and the patch and blobs after it.
 * The credential goes to the task alone (the backend hands it over; see docs/security.md §5), never to its harness.
 */
import type { KV } from "@nats-io/kv";
import { type AccountSigner, type AttemptCredential, mintAttemptUser } from "../../plane/nats-auth.js";
import type { RunConfig } from "../../protocol/config.js";
import { CellWorkSchema } from "../../protocol/messages.js";
import { StateKeys } from "../../protocol/subjects.js";
import type { AttemptKeyRef } from "./keys.js";

/** What an attempt's credential outlives its timeout by: the workdir before it, the patch and blobs after it. */
export const ATTEMPT_CREDENTIAL_GRACE_MS = 30 * 60_000;

/**
 * Mint the attempt's NATS user, or undefined when the cell's work is not in the jobs bucket (the task could not run
 * anyway: it fails to find its job and the dispatcher reports that).
 */
export async function mintAttemptNatsUser(
  signer: AccountSigner,
  jobs: KV,
  config: RunConfig,
  ref: AttemptKeyRef,
  now = Date.now(),
): Promise<AttemptCredential | undefined> {
  const e = await jobs.get(StateKeys.job(ref.run, ref.cellId));
  if (e?.operation !== "PUT" || e.length === 0) return undefined;
  const parsed = CellWorkSchema.safeParse(e.json());
  if (!parsed.success) return undefined;
  return await mintAttemptUser(
    signer,
    { run: ref.run, cell: ref.cellId, attempt: ref.attempt, task: parsed.data.taskId },
    now + config.timeout_seconds * 1_000 + ATTEMPT_CREDENTIAL_GRACE_MS,
  );
}
