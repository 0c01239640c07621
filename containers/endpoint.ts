/**
 * Where the Docker API is: DOCKER_HOST when set (unix://, tcp:// with DOCKER_TLS_VERIFY / DOCKER_CERT_PATH,
 * ssh://), else the first socket that exists of the default Docker socket and Podman's docker-compatible sockets
 * (rootless, then rootful). Pure apart from checking which sockets exist.
 */
import { statSync } from "node:fs";
import path from "node:path";
import { ContainerError } from "./errors.js";

export type Endpoint =
  | { kind: "unix"; socketPath: string; label: string; fromEnv: boolean }
  | {
      kind: "tcp";
      protocol: "http" | "https";
      host: string;
      port: number;
      /** DOCKER_CERT_PATH: ca.pem, cert.pem, key.pem read when DOCKER_TLS_VERIFY is set. */
      certPath?: string;
      label: string;
      fromEnv: true;
    }
  | { kind: "ssh"; host: string; port: number; username?: string; label: string; fromEnv: true };

export const DEFAULT_DOCKER_SOCKET = "/var/run/docker.sock";

/** The sockets tried, in order, when DOCKER_HOST is unset. */
export function defaultSockets(env: NodeJS.ProcessEnv): string[] {
  const out = [DEFAULT_DOCKER_SOCKET];
  if (env.XDG_RUNTIME_DIR) out.push(path.join(env.XDG_RUNTIME_DIR, "podman", "podman.sock"));
  out.push("/run/podman/podman.sock");
  return out;
}

function isSocket(p: string): boolean {
  try {
    return statSync(p).isSocket();
  } catch {
    return false;
  }
}

function badHost(value: string, reason: string): ContainerError {
  return new ContainerError(
    "invalid",
    `DOCKER_HOST=${value} is not usable: ${reason}; write unix:///path/to/docker.sock, tcp://host:2375 or ssh://user@host`,
  );
}

/** Parse DOCKER_HOST (or pick a default socket). `exists` is injectable for tests. */
export function resolveEndpoint(env: NodeJS.ProcessEnv, exists: (p: string) => boolean = isSocket): Endpoint {
  const value = env.DOCKER_HOST?.trim();
  if (!value) {
    const candidates = defaultSockets(env);
    const found = candidates.find(exists) ?? DEFAULT_DOCKER_SOCKET;
    return { kind: "unix", socketPath: found, label: `unix://${found}`, fromEnv: false };
  }
  if (value.startsWith("unix://")) {
    const socketPath = value.slice("unix://".length);
    if (!socketPath.startsWith("/")) throw badHost(value, "the socket path must be absolute");
    return { kind: "unix", socketPath, label: value, fromEnv: true };
  }
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw badHost(value, "not a URL");
  }
  if (url.protocol === "tcp:" || url.protocol === "http:" || url.protocol === "https:") {
    const tls = url.protocol === "https:" || (env.DOCKER_TLS_VERIFY ?? "") !== "";
    const port = url.port ? Number(url.port) : tls ? 2376 : 2375;
    if (!url.hostname) throw badHost(value, "no host");
    const ep: Endpoint = {
      kind: "tcp",
      protocol: tls ? "https" : "http",
      host: url.hostname,
      port,
      label: value,
      fromEnv: true,
    };
    if (tls && env.DOCKER_CERT_PATH) ep.certPath = env.DOCKER_CERT_PATH;
    return ep;
  }
  if (url.protocol === "ssh:") {
    if (!url.hostname) throw badHost(value, "no host");
    const ep: Endpoint = {
      kind: "ssh",
      host: url.hostname,
      port: url.port ? Number(url.port) : 22,
      label: value,
      fromEnv: true,
    };
    if (url.username) ep.username = decodeURIComponent(url.username);
    return ep;
  }
  throw badHost(value, `unsupported scheme ${url.protocol}`);
}

/** What to tell a user when nothing answers at the endpoint. */
export function unavailableHint(ep: Endpoint, env: NodeJS.ProcessEnv): string {
  if (ep.fromEnv) {
    return `nothing answered at DOCKER_HOST=${ep.label}: start that daemon, or unset DOCKER_HOST to use the default socket`;
  }
  const tried = defaultSockets(env).join(", ");
  return (
    `no Docker API answered (DOCKER_HOST is unset; tried ${tried}): start dockerd ` +
    "(e.g. `dockerd --bridge=none --iptables=false`), or Podman's socket (`systemctl --user start podman.socket`), " +
    "or set DOCKER_HOST=unix:///path/to/docker.sock"
  );
}
