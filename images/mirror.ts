/**
 * Mirroring the official SWE-bench instance images (`swebench/sweb.eval.x86_64.<instance>`, `__` written `_1776_`)
 * from a source registry into the configured private one (a local docker-registry here, ECR in the stack), so eval
 * hosts pull from inside the deployment and grades pin the digest the mirror answers with.
 */
import { type ContainerRuntime, type RegistryAuth, splitReference } from "../containers/index.js";
import type { Logger } from "../lib/log.js";
import { silentLogger } from "../lib/log.js";

/** The official remote image for an instance (TestSpec.instance_image_key with namespace "swebench"). */
export function officialImageName(instanceId: string, arch = "x86_64"): string {
  return `swebench/sweb.eval.${arch}.${instanceId.toLowerCase()}`.replaceAll("__", "_1776_");
}

export interface MirrorInput {
  instanceId: string;
  /**
   * Where the official images are: a registry prefix (`docker.io`, `127.0.0.1:5001`), or a full reference to copy
   * from instead of the official name.
   */
  from: string;
  /** The private registry prefix the copy goes to. */
  to: string;
  /** Tag of the source; default latest. */
  tag?: string;
  sourceAuth?: RegistryAuth;
  targetAuth?: RegistryAuth;
  logger?: Logger;
  signal?: AbortSignal;
}

export interface MirroredImage {
  name: string;
  digest: string;
  ref: string;
  /** The reference it was copied from, pinned by the source's digest when it gave one. */
  source: string;
}

/** The official image's reference in `registry` (no registry: Docker Hub's short name). */
export function officialImageRef(instanceId: string, registry?: string, tag = "latest"): string {
  const name = officialImageName(instanceId);
  return `${registry ? `${registry.replace(/\/+$/, "")}/` : ""}${name}:${tag}`;
}

function isFullReference(from: string): boolean {
  // A prefix is a host (with a port or a dot) and nothing after it; a full reference names a repository too.
  return from.includes("/") && !/^[^/]+\/?$/.test(from);
}

export async function mirrorImage(rt: ContainerRuntime, input: MirrorInput): Promise<MirroredImage> {
  const log = input.logger ?? silentLogger();
  const sig = input.signal ? { signal: input.signal } : {};
  const sourceRef = isFullReference(input.from)
    ? input.from
    : officialImageRef(input.instanceId, input.from, input.tag ?? "latest");
  const target = officialImageRef(input.instanceId, input.to, input.tag ?? "latest");
  log.info({ instance: input.instanceId, from: sourceRef, to: target }, "mirroring");
  await rt.pull(sourceRef, { ...sig, ...(input.sourceAuth ? { auth: input.sourceAuth } : {}) });
  const sourceRepo = splitReference(sourceRef).repo;
  const sourceDigest = await rt.repoDigest(sourceRef, sourceRepo);
  await rt.tag(sourceRef, target);
  const digest = await rt.push(target, { ...sig, ...(input.targetAuth ? { auth: input.targetAuth } : {}) });
  const name = splitReference(target).repo;
  return {
    name,
    digest,
    ref: `${name}@${digest}`,
    source: sourceDigest ? `${sourceRepo}@${sourceDigest}` : sourceRef,
  };
}
