import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { test } from "node:test";
import Anthropic from "@anthropic-ai/sdk";
import { startScriptedProvider } from "../../scripts/scripted-provider/index.js";
import { startNats } from "../helpers/nats.js";
import { ensureShimTopology, RUN_KEY, readLedger } from "./shim-fixture.js";

test("evalfleet shim: prints its port, meters calls to the ledger, caps by --max-turns, drains on SIGTERM", async () => {
  const nats = await startNats();
  const nc = await nats.connect("cli-test");
  await ensureShimTopology(nc);
  const provider = await startScriptedProvider({ keys: [RUN_KEY], scenario: { text: "hi from cli" } });
  const proc = spawn(
    process.execPath,
    [
      "--import",
      "tsx",
      "scripts/cli.ts",
      "shim",
      "--port",
      "0",
      "--upstream",
      provider.url,
      "--run",
      "cli-run",
      "--cell",
      "c1",
      "--attempt",
      "2",
      "--max-turns",
      "2",
      "--budget-usd",
      "5",
    ],
    {
      env: { ...process.env, NATS_URL: nats.url, EVALFLEET_RUN_KEY: RUN_KEY },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let out = "";
  let err = "";
  proc.stderr.on("data", (d: Buffer) => {
    err += d.toString();
  });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      proc.stdout.on("data", (d: Buffer) => {
        out += d.toString();
        const m = /^listening on 127\.0\.0\.1:(\d+)$/m.exec(out);
        if (m) resolve(Number(m[1]));
      });
      proc.once("exit", (code) => reject(new Error(`shim exited ${code}: ${err}`)));
    });
    const client = new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey: "dummy", maxRetries: 0 });
    const ask = () =>
      client.messages.create({
        model: "claude-haiku-4-5",
        max_tokens: 20,
        messages: [{ role: "user", content: "hi" }],
      });
    await ask();
    await ask();
    await assert.rejects(ask(), (e: unknown) => e instanceof Anthropic.APIError && e.status === 402);
    proc.kill("SIGTERM");
    await once(proc, "exit");
    const rows = await readLedger(nc, "cli-run");
    assert.deepEqual(
      rows.map((r) => r.status),
      ["ok", "ok", "refused"],
    );
    assert.ok(rows.every((r) => r.attempt === 2 && r.cellId === "c1"));
    assert.match(err, /cap reached: max_turns_exceeded/);
    const totals = JSON.parse(out.trim().split("\n").at(-1)!) as { turns: number; capReason: string };
    assert.equal(totals.turns, 2);
    assert.equal(totals.capReason, "max_turns_exceeded");
    assert.ok(!out.includes(RUN_KEY) && !err.includes(RUN_KEY));
  } finally {
    if (proc.exitCode === null) proc.kill("SIGKILL");
    await provider.close();
    await nats.cleanup();
  }
});
