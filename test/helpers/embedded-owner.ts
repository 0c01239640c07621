/**
 * A child process that owns an embedded database, as `evalfleet up` does: `embedded-owner.ts DATA_DIR COMMAND
 * serve|direct`. Prints one JSON line ({ url }) once open, writes rows on demand ("insert N" on stdin, each an
 * in-process transaction), and closes on SIGTERM.
 */
import { createInterface } from "node:readline";
import { openEmbeddedOwner } from "../../store/embedded.js";

const [dataDir, command, mode] = process.argv.slice(2);
if (!dataDir || !command) throw new Error("usage: embedded-owner.ts DATA_DIR COMMAND serve|direct");
const owned = await openEmbeddedOwner(dataDir, { command, serve: mode === "serve" });
await owned.db.query("CREATE TABLE IF NOT EXISTS probe (who text, i int, pad text)");
process.stdout.write(`${JSON.stringify({ url: owned.url })}\n`);
const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  const m = /^insert (\d+)$/.exec(line);
  if (!m) return;
  void (async () => {
    const n = Number(m[1]);
    await Promise.all(
      Array.from({ length: n }, (_, i) =>
        owned.db.transaction(async (tx) => {
          await tx.query("INSERT INTO probe VALUES ('owner', $1, $2)", [i, "o".repeat(100)]);
          await tx.query("INSERT INTO probe VALUES ('owner2', $1, $2)", [i, "o".repeat(100)]);
        }),
      ),
    );
    process.stdout.write(`${JSON.stringify({ inserted: n })}\n`);
  })();
});
process.once("SIGTERM", () => {
  lines.close();
  void owned.close().then(() => process.exit(0));
});
