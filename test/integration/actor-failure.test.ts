/**
 * An actor whose work loop dies does not linger as a process that reports itself running and takes no work: its
 * state becomes `failed` (its heartbeat says so) and `evalfleet actor` exits non-zero, so a supervisor restarts it.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import { openPlane, type Plane } from "../../plane/connect.js";
import { HeartbeatSchema } from "../../protocol/messages.js";
import { Consumers } from "../../protocol/topology.js";
import { type FreshDb, freshDb } from "../helpers/db.js";
import { startNats, type TestNats } from "../helpers/nats.js";

let nats: TestNats;
let store: FreshDb;
let plane: Plane;

before(async () => {
  nats = await startNats();
  store = await freshDb("actor_failure");
  plane = await openPlane({ nats: nats.settings, name: "test" });
});
after(async () => {
  await plane?.close();
  await store?.cleanup();
  await nats?.cleanup();
});

async function heartbeatState(): Promise<string | undefined> {
  for await (const k of await plane.kv.progress.keys("actor.planner.>")) {
    const e = await plane.kv.progress.get(k);
    if (e?.operation === "PUT") return HeartbeatSchema.parse(e.json()).state;
  }
  return undefined;
}

describe("an actor whose consume loop dies", { timeout: 120_000 }, () => {
  it("reports failed and its process exits non-zero, saying why", async () => {
    // Without PostgreSQL the actor owns an embedded database of its own.
    const dataDir = store.url ? [] : ["--data-dir", await mkdtemp(join(tmpdir(), "ef-actor-failure-"))];
    const child = spawn(process.execPath, ["bin/evalfleet.js", "actor", "planner", ...dataDir], {
      env: {
        PATH: process.env.PATH ?? "",
        HOME: process.env.HOME ?? "/tmp",
        ...nats.env,
        ...(store.url ? { DATABASE_URL: store.url } : {}),
        EVALFLEET_LOG_LEVEL: "info",
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let output = "";
    child.stdout.on("data", (b: Buffer) => (output += b.toString()));
    child.stderr.on("data", (b: Buffer) => (output += b.toString()));
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    for (let i = 0; i < 300 && (await heartbeatState()) !== "running"; i++) await delay(100);
    assert.equal(await heartbeatState(), "running", output);

    // The planner's durable consumer goes away under it: its loop can take no more work.
    await plane.jsm.consumers.delete(Consumers.planner.stream, Consumers.planner.durable);

    const code = await Promise.race([exited, delay(60_000).then(() => "still running" as const)]);
    if (code === "still running") child.kill("SIGKILL");
    assert.notEqual(code, "still running", `the actor kept running with no work loop:\n${output}`);
    assert.notEqual(code, 0, output);
    assert.match(output, /actor planner stopped working/);
    assert.equal(await heartbeatState(), "failed");
  });
});
