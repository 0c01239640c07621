/**
 * The NATS nodes, brought up from their EC2 user data in the synthesised template. The boot script is carried out
 * as a host would carry it out, for what matters to nats-server: every file it writes with a heredoc (the server
 * config, the accounts), the files it writes with `printf` (the operator-mode auth), the secrets it reads with `aws secretsmanager get-secret-value` (answered from the local
 * secrets file), its `sed` substitutions, its `mkdir`s, and its `docker run` of the NATS image (flags, mounts,
 * env file, arguments). What only a real instance does — finding and formatting the EBS volume, `docker login` —
 * is left out: each node's /data is a folder of its own here.
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import type { Container, ContainerRuntime } from "../../containers/index.js";
import type { Eni, Vpc } from "./vpc.js";

export interface BootedNode {
  name: string;
  eni: Eni;
  container: Container;
  /** the node's root: /etc/nats, /data … live under it */
  root: string;
}

const SECRET_CALL =
  /\$\(aws secretsmanager get-secret-value --secret-id (\S+) --query SecretString --output text\)/g;

function expand(text: string, vars: Map<string, string>, secret: (arn: string) => string): string {
  return text
    .replace(SECRET_CALL, (_m, arn: string) => secret(arn))
    .replace(/\$\{?([A-Z_][A-Z0-9_]*)\}?/g, (m, name: string) => vars.get(name) ?? m);
}

/** Carry out a boot script's file writes; return the `docker run` it ends with, parsed. */
export async function interpretBootScript(
  script: string,
  root: string,
  secret: (arn: string) => string,
): Promise<{
  image: string;
  args: string[];
  envFile?: string;
  mounts: Array<{ source: string; target: string; readOnly: boolean }>;
}> {
  const host = (p: string) => path.join(root, p);
  const vars = new Map<string, string>();
  const lines = script.split("\n");
  let run: Awaited<ReturnType<typeof interpretBootScript>> | undefined;
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    const heredoc = /^cat > (\S+) <<('?)(\w+)\2$/.exec(line);
    if (heredoc) {
      const [, file, quote, tag] = heredoc as unknown as [string, string, string, string];
      const body: string[] = [];
      for (i++; i < lines.length && lines[i] !== tag; i++) body.push(lines[i]!);
      const text = `${body.join("\n")}\n`;
      await mkdir(path.dirname(host(file)), { recursive: true });
      await writeFile(host(file), quote ? text : expand(text, vars, secret), { mode: 0o600 });
      continue;
    }
    // `printf '%s\n' "$(aws secretsmanager …)" > FILE`: a secret's value written to a file as it is.
    const printf = /^printf '%s\\n' "(.*)" > (\S+)$/.exec(line);
    if (printf) {
      const file = host(printf[2]!);
      await mkdir(path.dirname(file), { recursive: true });
      await writeFile(file, `${expand(printf[1]!, vars, secret)}\n`, { mode: 0o600 });
      continue;
    }
    const assign = /^([A-Z_][A-Z0-9_]*)=(.*)$/.exec(line);
    if (assign) {
      vars.set(assign[1]!, expand(assign[2]!, vars, secret));
      continue;
    }
    for (const part of line.split(" && ")) {
      const mk = /^mkdir -p (.+)$/.exec(part);
      if (mk) for (const d of mk[1]!.split(/\s+/)) await mkdir(host(d), { recursive: true });
      const sed = /^sed -i "s\|([^|]*)\|([^|]*)\|g" (\S+)$/.exec(part);
      if (sed) {
        const file = host(sed[3]!);
        const to = expand(sed[2]!, vars, secret);
        await writeFile(file, (await readFile(file, "utf8")).split(sed[1]!).join(to));
      }
      if (part.startsWith("docker run ")) run = parseDockerRun(part, host);
    }
  }
  if (!run) throw new Error("the boot script runs no container (no `docker run` line)");
  return run;
}

function parseDockerRun(
  cmd: string,
  host: (p: string) => string,
): {
  image: string;
  args: string[];
  envFile?: string;
  mounts: Array<{ source: string; target: string; readOnly: boolean }>;
} {
  const words = cmd.split(/\s+/).slice(2);
  const withValue = new Set(["--name", "--restart", "--network", "--env-file", "-v", "-e", "--user", "-u"]);
  const mounts: Array<{ source: string; target: string; readOnly: boolean }> = [];
  let envFile: string | undefined;
  let i = 0;
  for (; i < words.length && words[i]!.startsWith("-"); i++) {
    const w = words[i]!;
    if (!withValue.has(w)) continue;
    const v = words[++i]!;
    if (w === "-v") {
      const [src, dst, mode] = v.split(":");
      mounts.push({ source: host(src!), target: dst!, readOnly: mode === "ro" });
    }
    if (w === "--env-file") envFile = host(v);
  }
  return { image: words[i]!, args: words.slice(i + 1), mounts, ...(envFile ? { envFile } : {}) };
}

function parseEnvFile(text: string): Record<string, string> {
  return Object.fromEntries(
    text
      .split("\n")
      .filter((l) => /^[A-Za-z_][A-Za-z0-9_]*=/.test(l))
      .map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]),
  );
}

/** Boot one NATS node from its user data, in a namespace serving its DNS name on the client, route and monitor ports. */
export async function bootNatsNode(o: {
  rt: ContainerRuntime;
  vpc: Vpc;
  name: string;
  userData: string;
  root: string;
  secret: (arn: string) => string;
  image: (uri: string) => string;
  ports: number[];
}): Promise<BootedNode> {
  const run = await interpretBootScript(o.userData, o.root, o.secret);
  const env = run.envFile ? parseEnvFile(await readFile(run.envFile, "utf8")) : {};
  const eni = await o.vpc.eni({ label: o.name, serves: { [o.name]: o.ports } });
  const image = o.image(run.image);
  await o.rt.ensureImage(image);
  const container = await o.rt.create({
    image,
    name: `ef-rehearse-${o.name.split(".")[0]}-${process.pid}`,
    command: run.args,
    env,
    network: eni.network,
    mounts: [eni.hostsMount, ...run.mounts],
    labels: { "io.evalfleet.rehearsal": String(process.pid) },
  });
  await container.start();
  return { name: o.name, eni, container, root: o.root };
}
