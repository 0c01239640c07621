import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { readFile, writeFile } from "node:fs/promises";
import { connect as tcpConnect } from "node:net";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { describe, it } from "node:test";
import { toEvalfleetError } from "../../protocol/errors.js";
import { lockPath, openEmbeddedClient, openEmbeddedOwner } from "../../store/embedded.js";
import { tempDirForSuite } from "../helpers/suite.js";

const OWNER = resolve(import.meta.dirname, "../helpers/embedded-owner.ts");

interface Owner {
  child: ChildProcess;
  next(): Promise<Record<string, unknown>>;
  stop(): Promise<void>;
}

async function startOwner(dataDir: string, command: string, mode: "serve" | "direct"): Promise<Owner> {
  const child = spawn(process.execPath, ["--import", "tsx", OWNER, dataDir, command, mode], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const lines = createInterface({ input: child.stdout! });
  const queue: string[] = [];
  const waiting: Array<(l: string) => void> = [];
  lines.on("line", (l) => {
    const w = waiting.shift();
    if (w) w(l);
    else queue.push(l);
  });
  const next = () =>
    new Promise<Record<string, unknown>>((res, rej) => {
      const take = (l: string) => res(JSON.parse(l) as Record<string, unknown>);
      const q = queue.shift();
      if (q !== undefined) take(q);
      else {
        waiting.push(take);
        child.once("exit", (code) => rej(new Error(`owner exited ${code}`)));
      }
    });
  return {
    child,
    next,
    stop: () =>
      new Promise<void>((res) => {
        if (child.exitCode !== null) return res();
        child.once("exit", () => res());
        child.kill("SIGTERM");
      }),
  };
}

/** Raw wire messages, to send a Parse in one write and its Bind / Execute / Sync in a later one. */
function msg(type: string, body: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.write(type, 0, "latin1");
  head.writeInt32BE(4 + body.length, 1);
  return Buffer.concat([head, body]);
}
function startup(): Buffer {
  const body = Buffer.from("user\0postgres\0database\0postgres\0\0", "latin1");
  const head = Buffer.alloc(8);
  head.writeInt32BE(8 + body.length, 0);
  head.writeInt32BE(196608, 4);
  return Buffer.concat([head, body]);
}
const cstr = (s: string) => Buffer.from(`${s}\0`, "utf8");
const int16 = (n: number) => {
  const b = Buffer.alloc(2);
  b.writeInt16BE(n);
  return b;
};
const int32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeInt32BE(n);
  return b;
};

describe("the embedded database shared between processes", () => {
  const dir = tempDirForSuite("ef-embedded-");

  it("a served database: other processes connect and no row is lost while the owner writes too", async () => {
    const dataDir = join(dir(), "served", "pglite");
    const owner = await startOwner(dataDir, "up", "serve");
    try {
      const { url } = await owner.next();
      assert.match(String(url), /^postgres:\/\/postgres@127\.0\.0\.1:\d+\/postgres$/);
      const lock = JSON.parse(await readFile(lockPath(dataDir), "utf8")) as { pid: number; url: string };
      assert.equal(lock.pid, owner.child.pid);
      assert.equal(lock.url, url);

      const client = await openEmbeddedClient(dataDir, { command: "dashboard" });
      assert.equal(client.url, url);
      assert.match(client.label, /through `evalfleet up`/);
      try {
        owner.child.stdin!.write("insert 200\n");
        // Batches with 100 KB parameters arrive over several reads while the owner commits its own transactions.
        const big = "c".repeat(100_000);
        await Promise.all([
          ...Array.from({ length: 40 }, (_, i) =>
            client.db.transaction(async (tx) => {
              await tx.query("INSERT INTO probe VALUES ('client', $1, $2)", [i, big]);
              const r = await tx.query<{ n: number }>(
                "SELECT count(*)::int AS n FROM probe WHERE who = 'client' AND i = $1",
                [i],
              );
              assert.equal(r.rows[0]?.n, 1, "a transaction sees its own row, and only its own");
            }),
          ),
          ...Array.from({ length: 200 }, (_, i) =>
            client.db
              .query<{ v: number; s: string }>("SELECT $1::int AS v, $2::text AS s", [i, `s${i}`])
              .then((r) => {
                assert.deepEqual(r.rows[0], { v: i, s: `s${i}` });
              }),
          ),
        ]);
        assert.deepEqual(await owner.next(), { inserted: 200 });
        const counts = await client.db.query<{ who: string; n: number }>(
          "SELECT who, count(*)::int AS n FROM probe GROUP BY who ORDER BY who",
        );
        assert.deepEqual(counts.rows, [
          { who: "client", n: 40 },
          { who: "owner", n: 200 },
          { who: "owner2", n: 200 },
        ]);
      } finally {
        await client.close();
      }
    } finally {
      await owner.stop();
    }
    // After both stopped, the folder holds every row (it was opened by one process only).
    const again = await openEmbeddedOwner(dataDir, { command: "report", serve: false });
    try {
      const n = await again.db.query<{ n: number }>("SELECT count(*)::int AS n FROM probe");
      assert.equal(n.rows[0]?.n, 440);
    } finally {
      await again.close();
    }
  });

  it("a client's Parse and its Bind arriving apart cannot be split by another client's statement", async () => {
    const dataDir = join(dir(), "split", "pglite");
    const owner = await startOwner(dataDir, "up", "serve");
    try {
      const { url } = await owner.next();
      const port = Number(new URL(String(url)).port);
      const sock = tcpConnect({ host: "127.0.0.1", port });
      let got = Buffer.alloc(0);
      sock.on("data", (d: Buffer) => {
        got = Buffer.concat([got, d]);
      });
      await new Promise<void>((r) => sock.once("connect", () => r()));
      sock.write(startup());
      await new Promise((r) => setTimeout(r, 300));
      got = Buffer.alloc(0);
      // Parse of the unnamed statement alone…
      sock.write(msg("P", Buffer.concat([cstr(""), cstr("SELECT $1::text AS mine"), int16(0)])));
      await new Promise((r) => setTimeout(r, 200));
      // …meanwhile another client prepares its own unnamed statement in the same session…
      const other = await openEmbeddedClient(dataDir, { command: "report" });
      const otherQuery = other.db.query<{ theirs: string }>("SELECT $1::text AS theirs, 42 AS n", ["x"]);
      await new Promise((r) => setTimeout(r, 200));
      // …then Bind / Describe / Execute / Sync.
      const value = Buffer.from("from-the-first-client");
      sock.write(
        Buffer.concat([
          msg(
            "B",
            Buffer.concat([cstr(""), cstr(""), int16(0), int16(1), int32(value.length), value, int16(0)]),
          ),
          msg("D", Buffer.concat([Buffer.from("P"), cstr("")])),
          msg("E", Buffer.concat([cstr(""), int32(0)])),
          msg("S", Buffer.alloc(0)),
        ]),
      );
      const deadline = Date.now() + 10_000;
      while (!got.includes(Buffer.from("Z")) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 50));
      const text = got.toString("latin1");
      assert.match(text, /mine/, "the row description is the first client's statement");
      assert.match(text, /from-the-first-client/);
      assert.doesNotMatch(text, /theirs/);
      assert.deepEqual((await otherQuery).rows[0], { theirs: "x", n: 42 });
      sock.end(msg("X", Buffer.alloc(0)));
      await other.close();
    } finally {
      await owner.stop();
    }
  });

  it("a second owner of the same folder fails fast, saying who holds it and what to do", async () => {
    const dataDir = join(dir(), "second", "pglite");
    const owner = await startOwner(dataDir, "up", "serve");
    try {
      await owner.next();
      const err = await openEmbeddedOwner(dataDir, { command: "start", serve: true }).then(
        () => null,
        (e: unknown) => e,
      );
      assert.ok(err, "the second owner is refused");
      const e = toEvalfleetError(err);
      assert.equal(e.code, "EF_CONFLICT");
      assert.match(e.message, new RegExp(`in use by \`evalfleet up\` \\(pid ${owner.child.pid}\\)`));
      assert.match(e.message, /stop that process first, or give this one its own --state-dir/);
    } finally {
      await owner.stop();
    }
  });

  it("a folder held by a command that does not serve it is refused to the next one with what to do", async () => {
    const dataDir = join(dir(), "direct", "pglite");
    const owner = await startOwner(dataDir, "report", "direct");
    try {
      await owner.next();
      const err = await openEmbeddedClient(dataDir, { command: "dashboard" }).then(
        () => null,
        (e: unknown) => e,
      );
      const e = toEvalfleetError(err);
      assert.equal(e.code, "EF_CONFLICT");
      assert.match(e.message, /in use by `evalfleet report`/);
      assert.match(e.message, /Wait for it to finish or stop it/);
      assert.match(e.message, /evalfleet up/);
    } finally {
      await owner.stop();
    }
  });

  it("a lock left by a process that died is taken over", async () => {
    const dataDir = join(dir(), "stale", "pglite");
    // A pid that is not running: a child that has already exited.
    const dead = spawn(process.execPath, ["-e", "0"]);
    await new Promise((r) => dead.once("exit", r));
    await writeFile(
      lockPath(dataDir),
      JSON.stringify({
        pid: dead.pid,
        command: "up",
        url: "postgres://postgres@127.0.0.1:1/postgres",
        serves: true,
      }),
    ).catch(async () => {
      const { mkdir } = await import("node:fs/promises");
      await mkdir(join(dir(), "stale"), { recursive: true });
      await writeFile(
        lockPath(dataDir),
        JSON.stringify({ pid: dead.pid, command: "up", url: null, serves: true }),
      );
    });
    const db = await openEmbeddedClient(dataDir, { command: "report", waitForServerMs: 0 });
    try {
      const lock = JSON.parse(await readFile(lockPath(dataDir), "utf8")) as { pid: number; command: string };
      assert.deepEqual([lock.pid, lock.command], [process.pid, "report"]);
    } finally {
      await db.close();
    }
    await assert.rejects(readFile(lockPath(dataDir)), /ENOENT/, "closing releases the lock");
  });
});
