/**
 * A child process that holds a state folder's NATS as `evalfleet up` does: `plane-nats-owner.ts STATE_DIR RUN`
 * claims `<state-dir>/nats.lock`, starts a nats-server on `<state-dir>/nats/store`, records its URL, creates the
 * topology, puts `RUN/probe/0/patch.diff` in the object store and a progress key for RUN. Prints one JSON line
 * ({ url }) once ready; stops its server and releases the claim on SIGTERM.
 */
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { natsAt } from "../../config/index.js";
import { freePort, localNatsAuth, NatsServerNode, writeNodeConfig } from "../../local/nats-server.js";
import { claimPlaneNats } from "../../local/plane-nats.js";
import { openPlane } from "../../plane/connect.js";
import { emptyRunProgress } from "../../protocol/messages.js";
import { ProgressKeys } from "../../protocol/subjects.js";

const [stateDir, run] = process.argv.slice(2);
if (!stateDir || !run) throw new Error("usage: plane-nats-owner.ts STATE_DIR RUN");
const claim = await claimPlaneNats(stateDir, "up");
const natsDir = join(stateDir, "nats");
await mkdir(natsDir, { recursive: true });
const spec = {
  name: "owner",
  port: await freePort(),
  storeDir: join(natsDir, "store"),
  configFile: join(natsDir, "nats.conf"),
};
// The accounts `up` uses: a plane started on this store later (or `report`) must find the data under them.
const auth = await localNatsAuth(natsDir);
await writeNodeConfig(spec, [], undefined, auth.config);
const node = new NatsServerNode(spec, process.env.NATS_SERVER_BIN || undefined);
await node.start();
await claim.publish(node.url, true);
const plane = await openPlane({
  nats: natsAt(node.url, { auth: { kind: "creds", file: auth.credsFile } }),
  name: "owner",
});
await plane.blobs.putBlob(
  { name: `${run}/probe/0/patch.diff` },
  new TextEncoder().encode("diff --git a/probe b/probe\n+from the object store\n"),
);
const progress = emptyRunProgress({ run, phase: "finished", message: "probe" });
await plane.kv.progress.put(ProgressKeys.run(run), JSON.stringify(progress));
process.stdout.write(`${JSON.stringify({ url: node.url })}\n`);
process.once("SIGTERM", () => {
  void (async () => {
    await plane.close();
    await node.stop();
    await claim.release();
    process.exit(0);
  })();
});
