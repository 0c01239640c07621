import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync } from "node:fs";
import { appendFile, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import { startScriptedProvider } from "../../scripted-provider/index.js";
import { startNats, type TestNats } from "../helpers/nats.js";
import { ensureShimTopology, RUN_KEY, readLedger } from "./shim-fixture.js";

/** `evalfleet shim` as a child process; resolves once it says its port. */
async function spawnShim(
  nats: TestNats,
  upstream: string,
  args: string[],
): Promise<{ proc: ChildProcess; port: number; out: () => string; err: () => string }> {
  const proc = spawn(
    process.execPath,
    ["--import", "tsx", "cli/main.ts", "shim", "--port", "0", "--upstream", upstream, ...args],
    {
      env: { ...process.env, ...nats.env, EVALFLEET_RUN_KEY: RUN_KEY },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let out = "";
  let err = "";
  proc.stderr?.on("data", (d: Buffer) => {
    err += d.toString();
  });
  const port = await new Promise<number>((resolve, reject) => {
    proc.stdout?.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /^listening on 127\.0\.0\.1:(\d+)$/m.exec(out);
      if (m) resolve(Number(m[1]));
    });
    proc.once("exit", (code) => reject(new Error(`shim exited ${code}: ${err}`)));
  });
  return { proc, port, out: () => out, err: () => err };
}

const ask = (port: number) =>
  new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey: "dummy", maxRetries: 0 }).messages.create({
    model: "claude-haiku-4-5",
    max_tokens: 20,
    messages: [{ role: "user", content: "hi" }],
  });

/** NATS with the shim's streams, a scripted provider, and a spool file's path in a fresh folder. */
async function rig(text: string) {
  const nats = await startNats();
  const nc = await nats.connect("cli-test");
  await ensureShimTopology(nc);
  const provider = await startScriptedProvider({ keys: [RUN_KEY], scenario: { text } });
  const spool = join(await mkdtemp(join(tmpdir(), "ef-shim-cli-")), "ledger.jsonl");
  return { nats, nc, provider, spool };
}

test("evalfleet shim: prints its port, meters calls to the ledger, caps by --max-turns, drains on SIGTERM", async () => {
  const { nats, nc, provider, spool } = await rig("hi from cli");
  const shim = await spawnShim(nats, provider.url, [
    ...["--run", "cli-run", "--cell", "c1", "--attempt", "2"],
    ...["--max-turns", "2", "--budget-usd", "5", "--ledger-spool", spool],
  ]);
  const { proc } = shim;
  try {
    await ask(shim.port);
    await ask(shim.port);
    await assert.rejects(ask(shim.port), (e: unknown) => e instanceof Anthropic.APIError && e.status === 402);
    proc.kill("SIGTERM");
    await once(proc, "exit");
    const rows = await readLedger(nc, "cli-run");
    assert.deepEqual(
      rows.map((r) => r.status),
      ["ok", "ok", "refused"],
    );
    assert.ok(rows.every((r) => r.attempt === 2 && r.cellId === "c1"));
    assert.match(shim.err(), /cap reached: max_turns_exceeded/);
    const totals = JSON.parse(shim.out().trim().split("\n").at(-1)!) as { turns: number; capReason: string };
    assert.equal(totals.turns, 2);
    assert.equal(totals.capReason, "max_turns_exceeded");
    assert.ok(!shim.out().includes(RUN_KEY) && !shim.err().includes(RUN_KEY));
    assert.equal(existsSync(spool), false, "every row acked: no spool file left");
  } finally {
    if (proc.exitCode === null) proc.kill("SIGKILL");
    await provider.close();
    await nats.cleanup();
    await rm(dirname(spool), { recursive: true, force: true });
  }
});

test("a shim whose NATS server is gone stops on SIGTERM, keeps its rows in the spool; the next start sends them once", async () => {
  const { nats, nc, provider, spool } = await rig("hi");
  const args = [
    ...["--run", "spool-run", "--cell", "c1", "--attempt", "0"],
    ...["--ledger-spool", spool, "--stop-timeout-seconds", "3"],
  ];
  const procs: ChildProcess[] = [];
  try {
    const first = await spawnShim(nats, provider.url, args);
    procs.push(first.proc);
    await ask(first.port);
    // The first call's row is in the stream before NATS goes away.
    for (let i = 0; i < 200 && (await readLedger(nc, "spool-run")).length === 0; i++)
      await new Promise((r) => setTimeout(r, 50));
    const [landed] = await readLedger(nc, "spool-run");
    assert.ok(landed, "the first call's row landed while NATS was up");
    await nats.nodes[0]!.stop("SIGKILL");
    // Metered and answered, but its row cannot be published.
    await ask(first.port);
    first.proc.kill("SIGTERM");
    const [code] = (await once(first.proc, "exit")) as [number | null];
    assert.equal(code, 0, `the shim stopped cleanly without NATS: ${first.err()}`);
    const kept = (await readFile(spool, "utf8")).trim().split("\n");
    assert.equal(kept.length, 1, "the unpublished row is in the spool");
    const keptRow = JSON.parse(kept[0]!) as { callId: string };
    assert.notEqual(keptRow.callId, landed.callId);
    // A row that did land, spooled as well (a stop between publish and ack): its message id drops it.
    await appendFile(spool, `${JSON.stringify(landed)}\n`);

    await nats.nodes[0]!.start();
    const second = await spawnShim(nats, provider.url, args);
    procs.push(second.proc);
    // It publishes the spooled rows first (JetStream may take a moment after its restart to answer).
    for (let i = 0; i < 400 && (await readLedger(nc, "spool-run").catch(() => [])).length < 2; i++)
      await new Promise((r) => setTimeout(r, 50));
    second.proc.kill("SIGTERM");
    await once(second.proc, "exit");
    assert.equal(existsSync(spool), false, "the spooled rows were acked: the spool is gone");
    const rows = await readLedger(nc, "spool-run");
    assert.deepEqual(
      rows.map((r) => r.callId).sort(),
      [landed.callId, keptRow.callId].sort(),
      "each row once",
    );
  } finally {
    for (const p of procs) if (p.exitCode === null) p.kill("SIGKILL");
    await provider.close();
    await nats.cleanup();
    await rm(dirname(spool), { recursive: true, force: true });
  }
});
