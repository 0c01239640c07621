import { existsSync } from "node:fs";
import { join } from "node:path";
import { natsAt, type SettingsOf } from "../../config/index.js";
import { freePort, localNatsAuth, NatsServerNode, writeNodeConfig } from "../../local/nats-server.js";
import { claimPlaneNats, type PlaneNatsClaim, planeNats } from "../../local/plane-nats.js";
import { openPlane } from "../../plane/connect.js";

/**
 * Blobs (patches, trajectories) from the object store: NATS_URL when set; else the plane `evalfleet up` / `start` serves from this
 * state folder (the URL it recorded); else, when no process holds the folder's NATS store, a nats-server of our
 * own on it for as long as the command takes (holding the store, so a plane started meanwhile waits for us
 * rather than opening it twice); else each row's diff column (with a warning).
 */
export async function openBlobReader(
  s: SettingsOf<"report">,
  command: string,
): Promise<{
  get: (ref: string) => Promise<string | null>;
  close(): Promise<void>;
}> {
  let node: NatsServerNode | undefined;
  let claim: PlaneNatsClaim | undefined;
  const stop = async () => {
    await node?.stop();
    await claim?.release();
  };
  try {
    const natsDir = join(s.state.dir, "nats");
    let nats = await planeNats(s);
    if (!nats.configured && existsSync(join(natsDir, "store"))) {
      claim = await claimPlaneNats(s.state.dir, command);
      const spec = {
        name: `evalfleet-${command}`,
        port: await freePort(),
        storeDir: join(natsDir, "store"),
        configFile: join(natsDir, "report.conf"),
      };
      // The same accounts as the plane that wrote the store: JetStream keeps its data per account.
      const auth = await localNatsAuth(natsDir);
      await writeNodeConfig(spec, [], undefined, auth.config);
      node = new NatsServerNode(spec, s.natsServer.bin);
      await node.start();
      await claim.publish(node.url, true);
      nats = natsAt(node.url, { auth: { kind: "creds", file: auth.credsFile } });
    }
    const plane = await openPlane({ name: `evalfleet-${command}`, ensure: false, nats });
    return {
      get: async (ref) => {
        const bytes = await plane.blobs.getBlob(ref).catch(() => null);
        return bytes === null ? null : new TextDecoder().decode(bytes);
      },
      close: async () => {
        await plane.close();
        await stop();
      },
    };
  } catch (err) {
    await stop();
    process.stderr.write(
      `warning: ${(err as Error).message}\n  blobs are not read from the object store (patches come from run_results.diff)\n`,
    );
    return { get: async () => null, close: async () => {} };
  }
}
