// The first process of an attempt's harness container (under docker's init, as the harness's own user). It holds
// no secret and can be killed by the harness like anything else in the container: all it does is serve the shim
// at 127.0.0.1:<port> — relaying each connection to the shim's unix socket, bind-mounted from the task, the only
// way out of a container with no network — then run the harness command in a process group of its own, pass
// SIGTERM / SIGINT on to that group, and exit with the harness's status (128 + signal number when killed).
//
//   node init.mjs <shim socket> <port> -- <command> [args...]
import { spawn } from "node:child_process";
import net from "node:net";
import os from "node:os";

const [socketPath, portText, sep, command, ...args] = process.argv.slice(2);
if (!socketPath || !portText || sep !== "--" || !command) {
  process.stderr.write("usage: init.mjs <shim socket> <port> -- <command> [args...]\n");
  process.exit(2);
}

const server = net.createServer((client) => {
  const upstream = net.connect(socketPath);
  client.pipe(upstream);
  upstream.pipe(client);
  client.on("error", () => upstream.destroy());
  upstream.on("error", () => client.destroy());
  client.on("close", () => upstream.destroy());
  upstream.on("close", () => client.destroy());
});
server.on("error", (err) => {
  process.stderr.write(`evalfleet sandbox: cannot serve the shim on 127.0.0.1:${portText}: ${err.message}\n`);
  process.exit(125);
});

server.listen(Number(portText), "127.0.0.1", () => {
  const child = spawn(command, args, { stdio: "inherit", detached: true });
  const group = (sig) => {
    try {
      process.kill(-child.pid, sig);
    } catch {
      // gone already
    }
  };
  for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"]) process.on(sig, () => group(sig));
  child.once("error", (err) => {
    process.stderr.write(`evalfleet sandbox: cannot start ${command}: ${err.message}\n`);
    process.exit(127);
  });
  child.once("exit", (code, signal) => {
    group("SIGKILL");
    process.exit(code ?? 128 + (os.constants.signals[signal] ?? 0));
  });
});
