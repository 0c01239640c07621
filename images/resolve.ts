/**
 * From an image reference to the digest it stands for, through the container runtime: a reference already pinned
 * (`name@sha256:…`) is kept; a tag is looked up in the daemon (pulled when missing) and pinned by the digest its
 * registry gave it, or — for an image that never left this daemon — by its image id, which is a digest of its content
 * too. Used by gold validation, which records what it graded in.
 */
import {
  ContainerError,
  type ContainerRuntime,
  type RegistryAuth,
  splitReference,
} from "../containers/index.js";

export interface PinnedImage {
  /** The repository (`host:port/name`), without tag or digest. */
  name: string;
  /** `sha256:<64 hex>`. */
  digest: string;
}

const PINNED = /^(.+)@(sha256:[0-9a-f]{64})$/;

/** `name@sha256:…` split, or null when the reference is not pinned by digest. */
export function parsePinned(ref: string | undefined | null): PinnedImage | null {
  const m = ref ? PINNED.exec(ref) : null;
  return m ? { name: m[1] as string, digest: m[2] as string } : null;
}

export function pinnedRef(p: PinnedImage): string {
  return `${p.name}@${p.digest}`;
}

/**
 * Pin `ref` by digest. ContainerError("pull" | "not_found" | …) when it can be neither found nor pulled; the message
 * says what was tried.
 */
export async function pinImage(
  rt: ContainerRuntime,
  ref: string,
  opts: { auth?: RegistryAuth; signal?: AbortSignal } = {},
): Promise<PinnedImage> {
  const pinned = parsePinned(ref);
  if (pinned) return pinned;
  const { repo } = splitReference(ref);
  let info = await rt.inspectImage(ref);
  if (!info) {
    await rt.pull(ref, opts);
    info = await rt.inspectImage(ref);
    if (!info) throw new ContainerError("pull", `pulled ${ref} but the daemon does not have it`);
  }
  const fromRegistry = info.repoDigests.find((d) => d.slice(0, d.indexOf("@")) === repo);
  if (fromRegistry) return { name: repo, digest: fromRegistry.slice(fromRegistry.indexOf("@") + 1) };
  // Built here and never pushed: its id is the digest of its content, what a grade can pin.
  return { name: repo, digest: info.id };
}
