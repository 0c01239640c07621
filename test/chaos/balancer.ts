/**
 * A TCP round-robin balancer in front of the gateway replicas: what DNS round robin or a load balancer is in a
 * deployment, so the shims have one upstream URL while replicas die and come back. Each client connection is pinned
 * to one replica; a replica that refuses the connection is skipped; a connection whose replica dies is closed, so
 * the shim sees exactly what it would see behind a real balancer (and retries on a fresh connection).
 */
import { createConnection, createServer, type Socket } from "node:net";

export interface Balancer {
  url: string;
  /** connections handed to each backend port so far */
  served(): Record<number, number>;
  close(): Promise<void>;
}

export async function startBalancer(ports: readonly number[], host = "127.0.0.1"): Promise<Balancer> {
  let next = 0;
  const served: Record<number, number> = {};
  const open = new Set<Socket>();
  const track = (s: Socket) => {
    open.add(s);
    s.once("close", () => open.delete(s));
  };
  const server = createServer({ pauseOnConnect: true }, (client) => {
    track(client);
    client.on("error", () => {});
    const start = next++;
    const tryBackend = (i: number) => {
      if (client.destroyed) return;
      if (i >= ports.length) {
        client.destroy();
        return;
      }
      const port = ports[(start + i) % ports.length]!;
      const backend = createConnection({ port, host });
      let connected = false;
      backend.once("connect", () => {
        connected = true;
        track(backend);
        served[port] = (served[port] ?? 0) + 1;
        client.pipe(backend);
        backend.pipe(client);
        client.resume();
      });
      backend.on("error", () => {
        if (!connected) tryBackend(i + 1);
        else client.destroy();
      });
      // A replica that closes (or dies) ends the client's connection too, after what it sent has been passed on.
      backend.once("close", () => {
        if (connected) client.end();
      });
      client.once("close", () => backend.destroy());
    };
    tryBackend(0);
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const addr = server.address();
  const port = typeof addr === "object" && addr ? addr.port : 0;
  return {
    url: `http://${host}:${port}`,
    served: () => ({ ...served }),
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const s of open) s.destroy();
      await closed;
    },
  };
}
