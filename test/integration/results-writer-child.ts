/**
 * A results-writer in its own process, for the kill -9 test: NATS_URL and DATABASE_URL from the environment, prints
 * "ready" once consuming and runs until it is killed.
 */
import { startResultsWriter } from "../../actors/results-writer/actor.js";
import { openPlane } from "../../actors/runtime/connect.js";
import { silentLogger } from "../../protocol/log.js";
import { openDb } from "../../store/db.js";

const url = process.env.DATABASE_URL;
if (!url) throw new Error("DATABASE_URL is required");
const plane = await openPlane({ name: "rw-child", ensure: false });
const db = await openDb({ url });
await startResultsWriter({ plane, db, log: silentLogger(), progressIntervalMs: 50 });
process.stdout.write("ready\n");
setInterval(() => {}, 60_000);
