// The forwarder of one rehearsal "ENI": it runs in the container that holds a task's (or an instance's) network
// namespace — `--network none`, so the namespace has only its loopback — and is that namespace's only way out.
// Outbound: the host's iptables rules in this namespace send each VPC address:port (DNS names in /etc/hosts point
// at 127.0.1.x) to a local port here, and each local port is piped to the router's unix socket for that route.
// Inbound: each port the task serves is reachable through a unix socket here, piped to 127.0.0.1:<port>.
// Plain JavaScript: the image it runs in has node but no TypeScript loader.
import { writeFileSync } from "node:fs";
import { readFile, rm } from "node:fs/promises";
import net from "node:net";

const config = JSON.parse(await readFile(process.argv[2], "utf8"));

function pipe(a, b) {
  a.on("error", () => b.destroy());
  b.on("error", () => a.destroy());
  a.on("close", () => b.destroy());
  b.on("close", () => a.destroy());
  a.pipe(b);
  b.pipe(a);
}

const listening = [];
for (const r of config.outbound) {
  const server = net.createServer((client) => pipe(client, net.connect(r.socket)));
  listening.push(
    new Promise((resolve, reject) => server.listen(r.port, "127.0.0.1", resolve).once("error", reject)),
  );
}
for (const r of config.inbound) {
  await rm(r.socket, { force: true });
  const server = net.createServer((client) => pipe(client, net.connect(r.port, "127.0.0.1")));
  listening.push(new Promise((resolve, reject) => server.listen(r.socket, resolve).once("error", reject)));
}
await Promise.all(listening);
writeFileSync(config.readyFile, "ready\n");
process.on("SIGTERM", () => process.exit(0));
