/**
 * containers/ — the one container runtime client every part of evalfleet uses (grading, attempt sandboxes, the ECS
 * emulator, `evalfleet images`). It speaks the Docker Engine API through dockerode to whatever answers it: dockerd,
 * or Podman's docker-compatible socket.
 *
 * Where it connects (endpoint.ts): DOCKER_HOST when set (`unix:///…`, `tcp://host:port` with DOCKER_TLS_VERIFY and
 * DOCKER_CERT_PATH, `ssh://user@host`); otherwise the first socket that exists of /var/run/docker.sock,
 * $XDG_RUNTIME_DIR/podman/podman.sock, /run/podman/podman.sock.
 *
 * ```ts
 * const rt = await ContainerRuntime.connect({ env, logger });  // throws ContainerError("unavailable") saying
 *                                                             // where it looked and what to start
 * const probe = await ContainerRuntime.probe();               // { ok, runtime } | { ok: false, reason }
 * rt.info   // { endpoint, serverVersion, apiVersion, podman, cpus, memoryBytes } of the daemon's host
 *
 * // One-shot: create, start, wait (killed past timeoutMs), logs, then always removed with its anonymous volumes.
 * const r = await rt.run({
 *   image: "127.0.0.1:5000/x@sha256:…", name, command: ["node", "test.js"], user: "1000:1000",
 *   env: { K: "v" }, workdir: "/testbed",
 *   mounts: [{ source: "/run/shim", target: "/run/shim", readOnly: false }],  // a folder holding a unix socket
 *   limits: { memoryBytes: 2 ** 30, cpus: 1, pids: 256 }, network: "none" (the default),
 *   readOnlyRoot: true, tmpfs: { "/tmp": "rw,size=64m" }, labels: { "io.evalfleet.owner": id },
 *   capDrop: ["ALL"], noNewPrivileges: true, init: true,
 * }, { timeoutMs, signal });  // → { exitCode, timedOut, aborted, oomKilled, stdout, stderr, combined }
 *
 * // Step by step (grading): create → start → putFiles / exec → wait → remove (in a finally).
 * const c = await rt.create(spec); await c.start();
 * await c.putFiles("/tmp", [{ name: "patch.diff", content }]);
 * await c.exec(["git", "apply", "/tmp/patch.diff"], { user, workdir, env, timeoutMs, signal });
 *                                 // → { exitCode, stdout, stderr, combined, timedOut, aborted, truncated }
 * await c.wait({ timeoutMs, signal }); await c.kill(); await c.logs({ tail }); await c.remove();
 * await c.oomKills();             // processes the memory limit killed (exec'd ones too), from the cgroup
 *
 * // Leftovers of a crashed supervisor: every container carries io.evalfleet.managed=true plus the caller's labels.
 * await rt.list({ "io.evalfleet.owner": id }); await rt.removeAll({ "io.evalfleet.owner": id });
 *
 * // Images.
 * await rt.inspectImage(ref)        // { id, repoDigests, repoTags, labels, user, sizeBytes } | null
 * await rt.repoDigest(ref, repo?)   // "sha256:…" in that repository, or null
 * await rt.pull(ref, { auth, signal }); await rt.ensureImage(ref);
 * await rt.tag(source, "host:port/name:tag"); const digest = await rt.push("host:port/name:tag");
 * await rt.build(contextDir, { tag, dockerfile, network: "none" (the default), labels, buildArgs, signal });
 * await rt.importRootfs("rootfs.tar" | stream, "name:tag", { changes: ["ENV PATH=…"] });
 * await rt.removeImage(ref);
 * ```
 *
 * Every failure is a ContainerError with a `failure` kind (unavailable, not_found, invalid, pull, push, build,
 * import, create, start, out_of_disk, timeout, runtime) and `retryable` set for the environment's failures, so
 * callers can record them as infrastructure failures instead of blaming the code inside.
 */
export {
  Container,
  type ExecOptions,
  type ExecResult,
  type WaitOptions,
  type WaitResult,
} from "./container.js";
export {
  DEFAULT_DOCKER_SOCKET,
  defaultSockets,
  type Endpoint,
  resolveEndpoint,
  unavailableHint,
} from "./endpoint.js";
export { ContainerError, type ContainerFailure, mentionsOutOfDisk, toContainerError } from "./errors.js";
export {
  type BindMount,
  type BuildOptions,
  type ConnectOptions,
  ContainerRuntime,
  type ContainerSpec,
  type ContainerSummary,
  type ImageInfo,
  type Limits,
  MANAGED_LABEL,
  type RegistryAuth,
  type RunOptions,
  type RunResult,
  type RuntimeInfo,
  splitReference,
} from "./runtime.js";
export { type Demuxed, demux, type TarFile, tarFiles } from "./tar.js";
