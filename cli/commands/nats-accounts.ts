import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import {
  createNatsAccounts,
  deployedNatsSecrets,
  type NatsAccounts,
  planeUserCreds,
  signerOf,
} from "../../plane/nats-auth.js";

/**
 * `evalfleet nats-accounts DIR`: the operator, accounts and signing key of a deployment's NATS (operator mode, as
 * `up` and the tests run it; docs/deploy.md), and the values of its secrets. Made once: run again on the same
 * folder, it writes the same accounts' files again (a new plane user), never new accounts — new accounts would
 * orphan the cluster's JetStream data, which is kept per account key.
 */
export function register(program: Command): void {
  program
    .command("nats-accounts")
    .description(
      "Make (once) a deployment's NATS operator and accounts, and write the values of its NATS secrets",
    )
    .argument(
      "<dir>",
      "a folder of your own (mode 0700): accounts.json there holds every seed; keep it offline",
    )
    .action(async (dir: string) => {
      const root = resolve(dir);
      await mkdir(root, { recursive: true, mode: 0o700 });
      const file = join(root, "accounts.json");
      let accounts: NatsAccounts;
      let made = false;
      try {
        accounts = JSON.parse(await readFile(file, "utf8")) as NatsAccounts;
      } catch {
        accounts = await createNatsAccounts();
        await writeFile(file, JSON.stringify(accounts, null, 2), { mode: 0o600, flag: "wx" });
        made = true;
      }
      const s = await deployedNatsSecrets(accounts);
      const out = {
        "server-auth.conf": `${s.serverAuth}\n`,
        "plane.json": JSON.stringify(s.plane),
        "signer.json": JSON.stringify(s.signer),
        // for an operator's own commands (NATS_CREDS), through the port forward
        "plane.creds": await planeUserCreds(signerOf(accounts), "operator"),
      };
      for (const [name, text] of Object.entries(out))
        await writeFile(join(root, name), text, { mode: 0o600 });
      process.stdout.write(
        `${made ? "made new" : "read the"} accounts in ${file} (account ${accounts.account.publicKey})\n` +
          "put each file into the deployment's secret of the same name:\n" +
          `  server-auth.conf -> Nats-server-auth   (the NATS nodes)\n` +
          `  plane.json       -> Nats-plane         (actors, gateway, eval workers: {"jwt","seed"})\n` +
          `  signer.json      -> Nats-signer        (the dispatcher alone: {"account","signingKey"})\n` +
          `and use plane.creds yourself: NATS_CREDS=${join(root, "plane.creds")} evalfleet watch …\n`,
      );
    });
}
