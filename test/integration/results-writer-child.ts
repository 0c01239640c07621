/**
 * A results-writer in its own process, for the kill -9 test: NATS_URL and DATABASE_URL from the environment, prints
 * "ready" once consuming and runs until it is killed.
 */
import { startResultsWriter } from "../../actors/results-writer/actor.js";
import { silentLogger } from "../../lib/log.js";
import { openPlane } from "../../plane/connect.js";
import { openDb } from "../../store/db.js";
import { natsFromEnv } from "../helpers/nats.js";

const url = process.env.DATABASE_URL;
if (!url) throw new Error("DATABASE_URL is required");
const plane = await openPlane({ name: "rw-child", nats: natsFromEnv(), ensure: false });
const db = await openDb({ url });
await startResultsWriter({ plane, db, log: silentLogger(), progressIntervalMs: 50 });
process.stdout.write("ready\n");
setInterval(() => {}, 60_000);
