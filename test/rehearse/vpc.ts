/**
 * The rehearsal's VPC. This machine allows no bridge networks and no traffic to private-range addresses, so every
 * container runs `--network none`; what connects them is this:
 *
 * - Each task (awsvpc) and each instance gets its own network namespace, held by an "ENI" container (eni.mjs),
 *   like the pause container ECS puts behind a Fargate task. The task's containers join it
 *   (`--network container:<eni>`), so they share its loopback, as containers of one Fargate task do.
 * - VPC names (`nats-0.nats.evalfleet.internal`, `gateway.svc.evalfleet.internal`, the database, the AWS
 *   endpoints) resolve through the ENI's /etc/hosts to a loopback address 127.0.1.x per name. iptables rules in the
 *   namespace (set from the host with nsenter) send name:port to the forwarder, which pipes it to the router's unix
 *   socket for that route. A namespace's own names are not redirected: its listeners (bound to 0.0.0.0, as in AWS)
 *   answer them, which is what lets three NATS nodes all listen on 4222/6222/8222 and still reach each other.
 * - The router (this process) serves each route: to the ENIs that registered for the name (Cloud Map: round robin
 *   over healthy endpoints; a NATS node's A record: its one ENI), or to a host endpoint (PostgreSQL for Aurora, the
 *   AWS emulator, the model provider standing in for the internet behind the NAT).
 * - 169.254.170.2 (the ECS container credentials endpoint) is added to the namespace's loopback and routed to the
 *   emulator, so the SDK finds task-role credentials exactly where ECS puts them.
 */
import { execFile } from "node:child_process";
import { mkdir, rm, stat, writeFile } from "node:fs/promises";
import net from "node:net";
import path from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { promisify } from "node:util";
import type { Container, ContainerRuntime } from "../../containers/index.js";

const pexec = promisify(execFile);

export const CREDENTIALS_ADDRESS = "169.254.170.2";
const FORWARD_BASE_PORT = 29000;

export type RouteTarget = { kind: "tcp"; host: string; port: number } | { kind: "unix"; path: string };

interface Route {
  name: string;
  port: number;
  vip: string;
  socket: string;
  targets: RouteTarget[];
  next: number;
  connections: number;
}

export interface Eni {
  id: string;
  container: Container;
  names: string[];
  /** `container:<id>`, for the task's containers */
  network: string;
  /** `/etc/hosts` with the VPC's names, mounted into every container of the namespace */
  hostsMount: { source: string; target: string; readOnly: boolean };
  close(): Promise<void>;
}

export interface VpcCounters {
  connections: number;
  refused: number;
}

export class Vpc {
  private readonly routes = new Map<string, Route>();
  private readonly vips = new Map<string, string>();
  private readonly servers: net.Server[] = [];
  private readonly enis = new Set<Eni>();
  private seq = 0;
  readonly counters: VpcCounters = { connections: 0, refused: 0 };

  constructor(
    private readonly rt: ContainerRuntime,
    /** host folder of the router's and the ENIs' sockets (mounted at /vpc in every ENI) */
    readonly dir: string,
    /** an image with node in it (the actors image) for the ENI containers */
    private readonly eniImage: string,
    private readonly eniScript: string,
  ) {}

  vip(name: string, fixed?: string): string {
    let v = this.vips.get(name);
    if (!v) {
      v = fixed ?? `127.0.1.${this.vips.size + 1}`;
      this.vips.set(name, v);
    }
    return v;
  }

  private key(name: string, port: number): string {
    return `${name}:${port}`;
  }

  /** Declare a route (before any ENI that should see it is made); targets may be added later. */
  async route(name: string, port: number, target?: RouteTarget, fixedAddress?: string): Promise<void> {
    const k = this.key(name, port);
    if (!this.routes.has(k)) {
      const idx = this.routes.size;
      const route: Route = {
        name,
        port,
        vip: this.vip(name, fixedAddress),
        socket: path.join(this.dir, `r${idx}.sock`),
        targets: [],
        next: 0,
        connections: 0,
      };
      this.routes.set(k, route);
      await rm(route.socket, { force: true });
      const server = net.createServer((c) => this.serve(route, c));
      this.servers.push(server);
      await new Promise<void>((resolve, reject) =>
        server.listen(route.socket, resolve).once("error", reject),
      );
    }
    if (target) this.routes.get(k)!.targets.push(target);
  }

  register(name: string, port: number, target: RouteTarget): void {
    const r = this.routes.get(this.key(name, port));
    if (!r) throw new Error(`vpc: no route ${name}:${port}`);
    r.targets.push(target);
  }

  deregister(target: RouteTarget): void {
    for (const r of this.routes.values())
      r.targets = r.targets.filter(
        (t) => !(t.kind === "unix" && target.kind === "unix" && t.path === target.path),
      );
  }

  /** Connect a client of `route` to one target, trying the others when one refuses (a task still starting). */
  private serve(route: Route, client: net.Socket): void {
    this.counters.connections++;
    route.connections++;
    client.on("error", () => {});
    const tries = [...route.targets];
    const start = route.next++;
    const attempt = (i: number) => {
      if (i >= tries.length) {
        this.counters.refused++;
        client.destroy();
        return;
      }
      const t = tries[(start + i) % tries.length]!;
      const up = t.kind === "tcp" ? net.connect(t.port, t.host) : net.connect(t.path);
      up.once("connect", () => {
        up.removeAllListeners("error");
        up.on("error", () => client.destroy());
        client.on("close", () => up.destroy());
        up.on("close", () => client.destroy());
        client.pipe(up);
        up.pipe(client);
      });
      up.once("error", () => attempt(i + 1));
    };
    attempt(0);
  }

  /**
   * A network namespace of its own, its forwarder running and its rules set, serving `serves` (name → ports its
   * listeners answer) through unix sockets the router reaches. `dockerSocket` makes the host's docker socket folder
   * reachable (an eval host).
   */
  async eni(opts: { label: string; serves?: Record<string, number[]>; credentials?: boolean }): Promise<Eni> {
    const id = `eni-${process.pid}-${++this.seq}`;
    const serves = opts.serves ?? {};
    for (const [name, ports] of Object.entries(serves)) for (const p of ports) await this.route(name, p);
    const own = new Set(Object.keys(serves));
    const outbound = [...this.routes.values()]
      .filter((r) => !own.has(r.name))
      .map((r, i) => ({
        route: r,
        port: FORWARD_BASE_PORT + 1 + i,
        socket: `/vpc/${path.basename(r.socket)}`,
      }));
    const inbound = Object.entries(serves).flatMap(([name, ports]) =>
      ports.map((port) => ({ name, port, socket: `/vpc/${id}-${port}.sock` })),
    );
    const cfgFile = path.join(this.dir, `${id}.json`);
    const readyFile = path.join(this.dir, `${id}.ready`);
    await writeFile(
      cfgFile,
      JSON.stringify({
        outbound: outbound.map((o) => ({ port: o.port, socket: o.socket })),
        inbound: inbound.map((i) => ({ port: i.port, socket: i.socket })),
        readyFile: `/vpc/${id}.ready`,
      }),
    );
    // The names, as the VPC's DNS would answer them (docker leaves /etc/hosts empty for a namespace with no network).
    const hostsFile = path.join(this.dir, "hosts");
    await writeFile(
      hostsFile,
      `127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n${[...this.vips.entries()]
        .filter(([, vip]) => vip.startsWith("127."))
        .map(([name, vip]) => `${vip}\t${name}`)
        .join("\n")}\n`,
    );
    const hostsMount = { source: hostsFile, target: "/etc/hosts", readOnly: true };
    const container = await this.rt.create({
      image: this.eniImage,
      name: `ef-rehearse-${id}`,
      entrypoint: ["/opt/evalfleet/node/bin/node"],
      command: ["/eni.mjs", `/vpc/${id}.json`],
      user: "0:0",
      network: "none",
      mounts: [
        hostsMount,
        { source: this.dir, target: "/vpc" },
        { source: this.eniScript, target: "/eni.mjs", readOnly: true },
      ],
      labels: { "io.evalfleet.rehearsal": String(process.pid), "io.evalfleet.eni": opts.label },
    });
    await container.start();
    const pid = (await container.state())?.Pid;
    if (!pid) throw new Error(`vpc: ENI ${id} did not start`);
    // Rules in its namespace, set from the host: each VPC address:port to its forwarder port.
    const ns = (args: string[]) => pexec("nsenter", ["-t", String(pid), "-n", ...args]);
    for (const o of outbound)
      await ns([
        "iptables",
        "-t",
        "nat",
        "-A",
        "OUTPUT",
        "-p",
        "tcp",
        "-d",
        o.route.vip,
        "--dport",
        String(o.route.port),
        "-j",
        "DNAT",
        "--to-destination",
        `127.0.0.1:${o.port}`,
      ]);
    if (opts.credentials) await ns(["ip", "addr", "add", `${CREDENTIALS_ADDRESS}/32`, "dev", "lo"]);
    for (let i = 0; i < 200; i++) {
      if (
        await stat(readyFile).then(
          () => true,
          () => false,
        )
      )
        break;
      if ((await container.state())?.Running === false) {
        const logs = await container.logs({ tail: 20 }).catch(() => ({ stdout: "", stderr: "" }));
        throw new Error(`vpc: ENI ${id} exited: ${logs.stderr || logs.stdout}`);
      }
      await sleep(25);
    }
    for (const i of inbound)
      this.register(i.name, i.port, { kind: "unix", path: path.join(this.dir, path.basename(i.socket)) });
    const eni: Eni = {
      id,
      container,
      names: Object.keys(serves),
      network: `container:${container.id}`,
      hostsMount,
      close: async () => {
        for (const i of inbound)
          this.deregister({ kind: "unix", path: path.join(this.dir, path.basename(i.socket)) });
        this.enis.delete(eni);
        await container.kill().catch(() => {});
        await container.remove().catch(() => {});
        await rm(cfgFile, { force: true });
        await rm(readyFile, { force: true });
      },
    };
    this.enis.add(eni);
    return eni;
  }

  /** A host-side door into the VPC: 127.0.0.1:<port> on this machine → the route (the operator's SSM tunnel). */
  async tunnel(name: string, port: number): Promise<{ port: number; close(): Promise<void> }> {
    const r = this.routes.get(this.key(name, port));
    if (!r) throw new Error(`vpc: no route ${name}:${port}`);
    const server = net.createServer((c) => this.serve(r, c));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    this.servers.push(server);
    return {
      port: (server.address() as net.AddressInfo).port,
      close: () => new Promise<void>((resolve) => server.close(() => resolve())),
    };
  }

  liveEnis(): number {
    return this.enis.size;
  }

  async close(): Promise<void> {
    await Promise.allSettled([...this.enis].map((e) => e.close()));
    await Promise.allSettled(
      this.servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))),
    );
    await mkdir(this.dir, { recursive: true });
  }
}
